"""PyTorch <-> Burn adapters: Linear weights transposed, norm parameters renamed.

torch stores a Linear weight as ``[d_out, d_in]``, Burn as ``[d_in, d_out]``; the transpose is
its own inverse, so both directions transpose. Norm layers call their parameters ``weight`` and
``bias`` in torch, ``gamma`` and ``beta`` in Burn. Conv, ConvTranspose and Embedding weights have
the same layout in both and pass through, as does transformers' ``Conv1D`` (GPT-2's ``c_attn``):
it stores its weight ``[in, out]``, Burn's Linear layout already.

In weightstore the model side is torch: load a Burn file with ``BurnToPyTorchAdapter`` as the
from-adapter, save for Burn with ``PyTorchToBurnAdapter`` as the to-adapter.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from weightstore.adapters._base import Adapter
from weightstore.adapters._module_types import NORMALIZATION_TYPES, burn_module_type
from weightstore.snapshot import TensorSnapshot

__all__ = ["BurnToPyTorchAdapter", "PyTorchToBurnAdapter"]

_TORCH_TO_BURN_NAMES = {"weight": "gamma", "bias": "beta"}
_BURN_TO_TORCH_NAMES = {"gamma": "weight", "beta": "bias"}


def _transposed(snapshot: TensorSnapshot) -> TensorSnapshot:
    """`snapshot` with its 2-D shape swapped and a loader that transposes when called."""
    load = snapshot.load

    def transpose() -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(load().T)

    rows, cols = snapshot.shape
    return snapshot.replace(shape=(cols, rows), load=transpose)


class _PyTorchBurnAdapter(Adapter):
    """The shared core of both directions: transpose Linear weights, rename norm parameters by
    a table. Subclasses give the tables; the transpose is its own inverse."""

    renames: ClassVar[dict[str, str]] = {}
    alternatives: ClassVar[dict[str, str]] = {}

    def adapt(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        """A 2-D Linear ``weight`` transposed, a norm parameter renamed by `renames`; any other
        snapshot (or one with no known module type) unchanged."""
        module_type = burn_module_type(snapshot.module_type)
        if module_type is None or not snapshot.path:
            return snapshot
        last = snapshot.path[-1]
        if module_type == "Linear" and last == "weight" and len(snapshot.shape) == 2:
            return _transposed(snapshot)
        if module_type in NORMALIZATION_TYPES and last in self.renames:
            return snapshot.replace(path=(*snapshot.path[:-1], self.renames[last]))
        return snapshot

    def alternative_name(self, name: str, module_type: str | None) -> str | None:
        """The other framework's name for a norm parameter (by `alternatives`), else None."""
        if burn_module_type(module_type) in NORMALIZATION_TYPES:
            return self.alternatives.get(name)
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PyTorchToBurnAdapter(_PyTorchBurnAdapter):
    """torch tensors into Burn's layout: use as the to-adapter when saving a torch model for
    Burn (``fc.weight`` transposed, ``norm.weight`` -> ``norm.gamma``)."""

    renames = _TORCH_TO_BURN_NAMES
    alternatives = _BURN_TO_TORCH_NAMES  # a Burn-named target looks for torch's name


class BurnToPyTorchAdapter(_PyTorchBurnAdapter):
    """Burn tensors into torch's layout: use as the from-adapter when loading a Burn file into
    a torch model (a torch ``norm.weight`` is found under Burn's ``norm.gamma``)."""

    renames = _BURN_TO_TORCH_NAMES
    alternatives = _TORCH_TO_BURN_NAMES  # a torch-named target looks for Burn's name
