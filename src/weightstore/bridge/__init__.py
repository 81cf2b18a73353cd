"""Models as the pipelines see them: PyTorch modules, dicts of NumPy arrays and JAX models
(Flax NNX modules, pytrees of JAX arrays); and what a save can read besides models: stores,
readers, snapshots, state dicts (`_sources.py`).

`bridge_for` picks the bridge for a model (to load into or save from); `source_for` picks what
a save reads from, a model's bridge or a model-free source; `to_data` and `to_torch` turn a
snapshot into an array or a tensor; `load_tree` loads a JAX pytree and returns the new tree.
torch and jax are imported only when a torch or JAX model or tensor is involved: their bridges
are imported inside the functions that need them, never at package import.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from weightstore.base._lazy import lazy_exports
from weightstore.bridge._model import ModelBridge as ModelBridge
from weightstore.bridge._model import TensorSource as TensorSource
from weightstore.bridge._model import TreeSlot as TreeSlot
from weightstore.bridge._model import is_torch_module as is_torch_module
from weightstore.bridge._model import is_torch_tensor as is_torch_tensor
from weightstore.errors import InvalidOptionError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from weightstore.bridge._sources import ModelFreeSource as ModelFreeSource
    from weightstore.bridge._sources import validate_adapter as validate_adapter
    from weightstore.report import ApplyResult
    from weightstore.snapshot import TensorSnapshot

# Model-free sources are for saves only: a load (whose first call pays for every import on its
# path) never imports them, nor the adapter classes they check against.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(
            (
                "ModelBridge", "TensorSource", "TreeSlot", "is_torch_module",
                "is_torch_tensor",
            ),
            "weightstore.bridge._model",
        ),
        **dict.fromkeys(("ModelFreeSource", "validate_adapter"), "weightstore.bridge._sources"),
        **dict.fromkeys(
            ("bridge_for", "is_jax_model", "load_tree", "source_for", "to_data", "to_torch"),
            __name__,
        ),
    },
)  # fmt: skip


def is_jax_model(model: object) -> bool:
    """True for what the JAX bridge loads: a `TreeSlot`, a Flax NNX module, or a pytree
    holding a JAX array or an abstract ``jax.ShapeDtypeStruct``.

    No JAX object exists before jax is imported, so until then this is False at the cost of a
    dict lookup, and jax is never imported to find out.
    """
    if isinstance(model, TreeSlot):
        return True
    if "jax" not in sys.modules:
        return False
    from weightstore.bridge._jax import is_jax_model as recognises

    return recognises(model)


def bridge_for(model: object, device: Any = None) -> ModelBridge:
    """The bridge that fits `model`.

    Args:
        model: a `torch.nn.Module`, or a (nested) mapping of NumPy arrays; a JAX model (a
            Flax NNX module, a pytree of JAX arrays, a `TreeSlot`: `_jax.py`); or a bridge
            built by the caller (a rank's view of a sharded model, `weightstore.distributed`),
            returned as it is (`device` is then the bridge's own).
        device: where loaded tensors go (default: where the model's tensors are). torch: a
            device. JAX: a ``Device``, a ``Sharding``, a pytree of shardings or a rule
            ``(path, shape) -> Sharding | None`` (`_jax.JaxBridge`).

    Returns:
        A bridge over `model` itself (loads change the model in place).

    Raises:
        InvalidOptionError: `model` is neither.
    """
    if is_torch_module(model):
        from weightstore.bridge._torch import TorchBridge

        return TorchBridge(model, device=device)  # type: ignore[arg-type]
    if is_jax_model(model):  # before Mapping: a Linen variable dict is one
        from weightstore.bridge._jax import JaxBridge

        return JaxBridge(model, device=device)
    if isinstance(model, Mapping):
        from weightstore.bridge._numpy import NumpyDictBridge

        return NumpyDictBridge(model)
    if isinstance(model, TensorSource) and callable(getattr(model, "load", None)):
        return model  # type: ignore[return-value]  # a bridge built by the caller, as it is
    raise InvalidOptionError(
        f"a model is a torch.nn.Module or a dict of NumPy arrays, not {type(model).__name__}"
    )


def source_for(source: object) -> TensorSource:
    """What a save reads from `source`: a model's bridge, or a model-free source.

    Args:
        source: a torch module, a JAX model or a (nested) dict of NumPy arrays (models); a
            store (its
            ``get_all_snapshots()``); a container reader (`TensorReader`); a mapping of names
            to `TensorSnapshot`s, torch tensors or NumPy arrays (a state dict); an iterable of
            `TensorSnapshot`s; or a `TensorSource` already built, returned as it is.

    Returns:
        Lazy snapshots in the source's order; nothing is read yet (see `_sources.py` for each
        kind's order, framework and module types).

    Raises:
        InvalidOptionError: `source` is none of these, or holds something that is no tensor.
    """
    from weightstore.bridge._sources import is_array_tree, model_free_source

    if is_torch_module(source) or is_array_tree(source) or is_jax_model(source):
        return bridge_for(source)
    if isinstance(source, TensorSource):
        return source
    found = model_free_source(source)
    if found is None:
        raise InvalidOptionError(
            f"cannot save from {type(source).__name__}: a source is a torch.nn.Module, a dict "
            "of NumPy arrays, a store, a container reader, a state dict (names -> tensors or "
            "TensorSnapshots) or an iterable of TensorSnapshots"
        )
    return found


def load_tree(tree: Any, store: Any, *, device: Any = None) -> tuple[Any, ApplyResult]:
    """Load `store` into a JAX pytree and return the new tree; `tree` itself is not changed.

    JAX arrays are immutable, so a Linen variable dict, a pytree of arrays or an abstract
    tree of ``jax.ShapeDtypeStruct`` leaves (``jax.eval_shape(model.init, ...)``) comes back
    as a new tree of the same structure, loaded leaves replaced and the rest kept. An NNX
    module loads in place and comes back as itself.

    Args:
        tree: the pytree or NNX module.
        store: what to read; its filter, remapping, from-adapter and options apply, as for
            ``load_from``.
        device: where loaded arrays go: a ``Device``, a ``Sharding``, a pytree of shardings
            shaped like `tree`, or a rule ``(path, shape) -> Sharding | None``; by default
            each leaf's own sharding.

    Returns:
        The new tree and the load report.

    Raises:
        LoadFailedError: as ``load_from``; `tree` is unchanged and nothing is returned.

    Example:
        >>> params, result = load_tree(params, SafetensorsStore.from_file("m.safetensors"))
        ... # doctest: +SKIP
    """
    slot = TreeSlot(tree)
    result: ApplyResult = store.apply_to(slot, device=device)
    return slot.tree, result


def to_data(snapshot: TensorSnapshot) -> np.ndarray[Any, Any]:
    """The snapshot's data as a NumPy array (a view of the file where the store allows)."""
    return snapshot.to_numpy()


def to_torch(snapshot: TensorSnapshot) -> torch.Tensor:
    """The snapshot's data as a CPU torch tensor sharing the array's memory."""
    from weightstore.bridge._torch import array_to_torch

    return array_to_torch(snapshot.to_numpy(), snapshot.dtype)
