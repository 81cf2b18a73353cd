"""Models as the pipelines see them: PyTorch modules and dicts of NumPy arrays.

`bridge_for` picks the bridge for a model; `to_data` and `to_torch` turn a snapshot into an
array or a tensor. torch is imported only when a torch model or tensor is involved: the torch
bridge is imported inside the functions that need it, never at package import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from weightstore.bridge._model import (
    LoadOutcome,
    LoadPlan,
    ModelBridge,
    PendingTensor,
    Target,
    is_torch_module,
)
from weightstore.errors import InvalidOptionError
from weightstore.snapshot import TensorSnapshot

if TYPE_CHECKING:
    import torch

__all__ = [
    "LoadOutcome",
    "LoadPlan",
    "ModelBridge",
    "PendingTensor",
    "Target",
    "bridge_for",
    "is_torch_module",
    "to_data",
    "to_torch",
]


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


def to_data(snapshot: TensorSnapshot) -> np.ndarray[Any, Any]:
    """The snapshot's data as a NumPy array (a view of the file where the store allows)."""
    return snapshot.to_numpy()


def to_torch(snapshot: TensorSnapshot) -> torch.Tensor:
    """The snapshot's data as a CPU torch tensor sharing the array's memory."""
    from weightstore.bridge._torch import array_to_torch

    return array_to_torch(snapshot.to_numpy(), snapshot.dtype)
