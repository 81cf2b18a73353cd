"""Models as the pipelines see them: PyTorch modules and dicts of NumPy arrays.

`to_data` and `to_torch` turn a snapshot into an array or a tensor; `bridge_for` picks the
bridge for a model. torch is imported only when a torch model or tensor is involved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from weightstore.bridge._model import ModelBridge, Target, bridge_for, is_torch_module
from weightstore.snapshot import TensorSnapshot

if TYPE_CHECKING:
    import torch

__all__ = ["ModelBridge", "Target", "bridge_for", "is_torch_module", "to_data", "to_torch"]


def to_data(snapshot: TensorSnapshot) -> np.ndarray[Any, Any]:
    """The snapshot's data as a NumPy array (a view of the file where the store allows)."""
    return snapshot.to_numpy()


def to_torch(snapshot: TensorSnapshot) -> torch.Tensor:
    """The snapshot's data as a CPU torch tensor sharing the array's memory."""
    from weightstore.bridge._torch import array_to_torch

    return array_to_torch(snapshot.to_numpy(), snapshot.dtype)
