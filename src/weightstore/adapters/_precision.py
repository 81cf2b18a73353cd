"""Precision adapters: F32 <-> F16 for chosen module types, and a cast of every float.

Both are lazy: the cast happens when the data is read. `HalfPrecisionAdapter` picks its
direction from the tensor on a save (F32 becomes F16, F16 becomes F32, for the module types in
its set) and from the model on a load (each F32 or F16 tensor becomes what the model tensor
holds), so one instance serves as the to-adapter of a save (halving the file) and the
from-adapter of the load, into an F32 model, a ``.half()`` one, or one that mixes both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import numpy as np

from weightstore.adapters._base import Adapter
from weightstore.adapters._module_types import burn_module_type
from weightstore.dtypes import DType, from_name
from weightstore.errors import InvalidOptionError
from weightstore.snapshot import TensorSnapshot

__all__ = ["DEFAULT_HALF_PRECISION_MODULES", "FloatCastAdapter", "HalfPrecisionAdapter"]

DEFAULT_HALF_PRECISION_MODULES: Final = frozenset(
    {
        "Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
        "ConvTranspose2d", "ConvTranspose3d", "DeformConv2d", "LayerNorm", "GroupNorm",
        "InstanceNorm", "RmsNorm", "PRelu", "Conv1D",
    }
)  # fmt: skip
"""The module types (Burn's names) `HalfPrecisionAdapter` converts by default: Burn's set, and
transformers' ``Conv1D`` (GPT-2's Linear layers). BatchNorm is left out because its running
variance underflows in F16."""

_F32, _F16 = from_name("F32"), from_name("F16")


def _cast(snapshot: TensorSnapshot, target: DType) -> TensorSnapshot:
    """`snapshot` as `target`, converted when its data is read."""
    load, numpy_dtype = snapshot.load, target.numpy

    def cast() -> np.ndarray[Any, Any]:
        return load().astype(numpy_dtype)

    return snapshot.replace(dtype=target, load=cast)


class HalfPrecisionAdapter(Adapter):
    """F32 <-> F16: on a save for tensors owned by modules in the set (Burn's default set,
    BatchNorm out), on a load to whichever of the two the model tensor holds.

    Attributes:
        modules: the module types converted, by Burn's names (`burn_module_type`).

    Example:
        >>> store = BurnpackStore.from_file("half").with_to_adapter(HalfPrecisionAdapter())
    """

    def __init__(self, modules: Iterable[str] = DEFAULT_HALF_PRECISION_MODULES) -> None:
        self.modules = frozenset(_normalised(m) for m in modules)

    def with_module(self, module_type: str) -> HalfPrecisionAdapter:
        """Also convert tensors of `module_type` (a torch or Burn class name)."""
        return HalfPrecisionAdapter(self.modules | {_normalised(module_type)})

    def without_module(self, module_type: str) -> HalfPrecisionAdapter:
        """Stop converting `module_type`; naming a type not in the set is an error."""
        name = _normalised(module_type)
        if name not in self.modules:
            raise InvalidOptionError(
                f"module type {module_type!r} is not in the half-precision set "
                f"({', '.join(sorted(self.modules))})"
            )
        return HalfPrecisionAdapter(self.modules - {name})

    def adapt(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        """F32 as F16 and F16 as F32 when the owning module is in `modules`; anything else,
        including tensors of unknown owner, unchanged."""
        if burn_module_type(snapshot.module_type) not in self.modules:
            return snapshot
        if snapshot.dtype == _F32:
            return _cast(snapshot, _F16)
        if snapshot.dtype == _F16:
            return _cast(snapshot, _F32)
        return snapshot

    def adapt_for_load(self, snapshot: TensorSnapshot, model_dtype: DType) -> TensorSnapshot:
        """An F32 or F16 tensor as the model's dtype when that is F32 or F16, whatever module
        owns it; anything else unchanged.

        The model decides, not the set: the set keeps BatchNorm out of half-precision *files*
        (its running variance underflows in F16), but a ``.half()`` model already holds its
        BatchNorm in F16 and must get F16 (Burn's adapter keeps it F32, which such a model
        cannot take), while an F32 model gets F32 back from a half file.
        """
        if {snapshot.dtype, model_dtype} == {_F32, _F16}:
            return _cast(snapshot, model_dtype)
        return snapshot

    def __repr__(self) -> str:
        return f"HalfPrecisionAdapter({sorted(self.modules)})"


def _normalised(module_type: str) -> str:
    """Burn's name for `module_type`, so torch and Burn spellings land on one set entry."""
    return burn_module_type(module_type) or module_type


class FloatCastAdapter(Adapter):
    """Casts every float tensor to one float dtype (bf16 included); other tensors pass.

    Attributes:
        target: the float dtype every float tensor becomes.

    Raises:
        InvalidOptionError: `target` is not a float dtype NumPy can hold; raised when the
            adapter is built, not when a tensor is read.
    """

    def __init__(self, target: DType) -> None:
        if not target.is_float or target.numpy is None:
            raise InvalidOptionError(f"FloatCastAdapter needs a float dtype, got {target.name}")
        self.target = target

    @classmethod
    def to(cls, target: DType | str) -> FloatCastAdapter:
        """An adapter casting floats to `target` (a `DType` or a name such as ``"BF16"``)."""
        return cls(from_name(target) if isinstance(target, str) else target)

    def adapt(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        """A float snapshot of another dtype as `target`, cast when read; others unchanged."""
        if snapshot.dtype.is_float and snapshot.dtype != self.target:
            return _cast(snapshot, self.target)
        return snapshot

    def __repr__(self) -> str:
        return f"FloatCastAdapter.to({self.target.name!r})"
