"""Models as the pipelines see them: PyTorch modules and dicts of NumPy arrays; and what a
save can read besides models: stores, readers, snapshots, state dicts (`_sources.py`).

`bridge_for` picks the bridge for a model (to load into or save from); `source_for` picks what
a save reads from, a model's bridge or a model-free source; `to_data` and `to_torch` turn a
snapshot into an array or a tensor. torch is imported only when a torch model or tensor is
involved: the torch bridge is imported inside the functions that need it, never at package
import.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from weightstore.bridge._model import (
    LoadOutcome,
    LoadPlan,
    ModelBridge,
    PendingTensor,
    Target,
    TensorSource,
    is_torch_module,
    is_torch_tensor,
)
from weightstore.errors import InvalidOptionError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from weightstore.bridge._sources import ModelFreeSource, validate_adapter
    from weightstore.snapshot import TensorSnapshot

__all__ = [
    "LoadOutcome",
    "LoadPlan",
    "ModelBridge",
    "ModelFreeSource",
    "PendingTensor",
    "Target",
    "TensorSource",
    "bridge_for",
    "is_torch_module",
    "is_torch_tensor",
    "source_for",
    "to_data",
    "to_torch",
    "validate_adapter",
]


# Model-free sources are for saves only: a load (whose first call pays for every import on its
# path) never imports them, nor the adapter classes they check against.
_FROM_SOURCES = frozenset({"ModelFreeSource", "validate_adapter"})


def __getattr__(name: str) -> Any:
    if name in _FROM_SOURCES:
        return getattr(importlib.import_module("weightstore.bridge._sources"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def bridge_for(model: object, device: Any = None) -> ModelBridge:
    """The bridge that fits `model`.

    Args:
        model: a `torch.nn.Module`, or a (nested) mapping of NumPy arrays.
        device: torch only; where loaded tensors go (default: where the model's tensors are).

    Returns:
        A bridge over `model` itself (loads change the model in place).

    Raises:
        InvalidOptionError: `model` is neither.
    """
    if is_torch_module(model):
        from weightstore.bridge._torch import TorchBridge

        return TorchBridge(model, device=device)  # type: ignore[arg-type]
    if isinstance(model, Mapping):
        from weightstore.bridge._numpy import NumpyDictBridge

        return NumpyDictBridge(model)
    raise InvalidOptionError(
        f"a model is a torch.nn.Module or a dict of NumPy arrays, not {type(model).__name__}"
    )


def source_for(source: object) -> TensorSource:
    """What a save reads from `source`: a model's bridge, or a model-free source.

    Args:
        source: a torch module or a (nested) dict of NumPy arrays (models); a store (its
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

    if is_torch_module(source) or is_array_tree(source):
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


def to_data(snapshot: TensorSnapshot) -> np.ndarray[Any, Any]:
    """The snapshot's data as a NumPy array (a view of the file where the store allows)."""
    return snapshot.to_numpy()


def to_torch(snapshot: TensorSnapshot) -> torch.Tensor:
    """The snapshot's data as a CPU torch tensor sharing the array's memory."""
    from weightstore.bridge._torch import array_to_torch

    return array_to_torch(snapshot.to_numpy(), snapshot.dtype)
