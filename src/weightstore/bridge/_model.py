"""What the load and save pipelines need from a model, whatever framework it comes from.

A `ModelBridge` lists the model's tensors as `Target`s (path, owning module types, dtype,
shape), produces snapshots of them for saving, and writes loaded arrays back. Bridges exist for
PyTorch modules and for plain (nested) dicts of NumPy arrays; `bridge_for` picks one without
importing torch unless the model is a torch module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from weightstore.dtypes import DType
from weightstore.errors import InvalidOptionError
from weightstore.snapshot import TensorSnapshot

__all__ = ["ModelBridge", "Target", "bridge_for", "is_torch_module"]


@dataclass(frozen=True, slots=True)
class Target:
    """One tensor slot in a model that a load can fill."""

    path: str
    container: tuple[str, ...]
    dtype: DType
    shape: tuple[int, ...]

    @property
    def container_path(self) -> str:
        return ".".join(self.container)

    @property
    def module_type(self) -> str | None:
        return self.container[-1] if self.container else None


class ModelBridge(Protocol):
    """How the pipelines reach into one kind of model."""

    def targets(self) -> list[Target]:
        """Every loadable tensor, in the model's own order (state_dict order for torch)."""
        ...

    def snapshots(self) -> list[TensorSnapshot]:
        """Lazy snapshots of every tensor, in the same order, for saving."""
        ...

    def assign(self, target: Target, array: np.ndarray[Any, Any], param_id: int | None) -> None:
        """Store `array` (already of the target's dtype and shape) into the model."""
        ...


def is_torch_module(model: object) -> bool:
    """True for `torch.nn.Module` instances, checked without importing torch."""
    return any(
        cls.__module__ == "torch.nn.modules.module" and cls.__name__ == "Module"
        for cls in type(model).__mro__
    )


def bridge_for(model: object, device: Any = None) -> ModelBridge:
    """The bridge that fits `model`: a torch module or a mapping of NumPy arrays."""
    if is_torch_module(model):
        from weightstore.bridge._torch import TorchBridge

        return TorchBridge(model, device=device)  # type: ignore[arg-type]
    if isinstance(model, Mapping):
        from weightstore.bridge._numpy import NumpyDictBridge

        return NumpyDictBridge(model)
    raise InvalidOptionError(
        f"a model is a torch.nn.Module or a dict of NumPy arrays, not {type(model).__name__}"
    )
