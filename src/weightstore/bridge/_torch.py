"""PyTorch modules as models: the only module in weightstore that imports torch.

Targets are the entries of ``model.state_dict()`` (parameters and persistent buffers, in that
order and under exactly those names). Loading copies into the existing tensors under
``torch.no_grad`` (no reallocation, ``requires_grad`` kept). Parameters still on the ``meta``
device are materialised straight from the loaded array: for a mapped file that is a view, so a
meta-built model costs no second allocation. Tied parameters (one tensor under two names) stay
tied.
"""

from __future__ import annotations

import functools
import secrets
import warnings
from typing import Any

import numpy as np
import torch

from weightstore.bridge._model import Target
from weightstore.dtypes import DType, from_numpy, from_torch
from weightstore.errors import DTypeError
from weightstore.snapshot import TensorSnapshot

__all__ = ["TorchBridge", "array_to_torch", "param_id_of", "torch_to_array"]

PARAM_ID_ATTRIBUTE = "_weightstore_param_id"


def param_id_of(tensor: torch.Tensor) -> int:
    """The tensor's stable u64 identity, drawn at random the first time it is asked for."""
    value = getattr(tensor, PARAM_ID_ATTRIBUTE, None)
    if value is None:
        value = secrets.randbits(64)
        setattr(tensor, PARAM_ID_ATTRIBUTE, value)
    return int(value)


def torch_to_array(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """A NumPy view of a CPU tensor's bytes (any dtype, bf16 and fp8 included), copied only when
    the tensor is not contiguous or not on the CPU."""
    if tensor.is_meta:
        raise DTypeError("tensor is on the meta device and has no data")
    dtype = from_torch(str(tensor.dtype))
    if dtype.numpy is None:
        raise DTypeError(f"torch dtype {tensor.dtype} has no NumPy form")
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    array = flat.view(torch.uint8).numpy().view(dtype.numpy)
    return array.reshape(tuple(tensor.shape))


def array_to_torch(array: np.ndarray[Any, Any], dtype: DType) -> torch.Tensor:
    """A CPU tensor sharing `array`'s memory (copied first only if not C-contiguous)."""
    if dtype.torch is None:
        raise DTypeError(f"dtype {dtype.name} has no torch form")
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    with warnings.catch_warnings():
        # Read-only sources are only ever copied from, never written through.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensor = torch.from_numpy(flat)
    return tensor.view(getattr(torch, dtype.torch)).reshape(array.shape)


def _container(model: torch.nn.Module, owner_path: str) -> tuple[str, ...]:
    names = [type(model).__name__]
    module = model
    for part in owner_path.split(".") if owner_path else ():
        module = module.get_submodule(part)
        names.append(type(module).__name__)
    return tuple(names)


class TorchBridge:
    """Reads and writes the parameters and persistent buffers of an `nn.Module`."""

    def __init__(self, model: torch.nn.Module, device: Any = None) -> None:
        self._model = model
        self._device = None if device is None else torch.device(device)
        self._state = {
            key: value
            for key, value in model.state_dict(keep_vars=True).items()
            if isinstance(value, torch.Tensor)
        }
        self._replaced: dict[int, torch.Tensor] = {}  # meta tensor id -> its materialisation

    def _owner(self, path: str) -> tuple[torch.nn.Module, str]:
        owner_path, _, name = path.rpartition(".")
        return self._model.get_submodule(owner_path), name

    def targets(self) -> list[Target]:
        return [
            Target(
                key,
                _container(self._model, key.rpartition(".")[0]),
                from_torch(str(tensor.dtype)),
                tuple(tensor.shape),
            )
            for key, tensor in self._state.items()
        ]

    def aliases(self) -> dict[str, str]:
        """Later names of tied tensors -> the first name holding the same tensor."""
        first: dict[int, str] = {}
        aliases = {}
        for key, tensor in self._state.items():
            if id(tensor) in first:
                aliases[key] = first[id(tensor)]
            else:
                first[id(tensor)] = key
        return aliases

    def snapshots(self) -> list[TensorSnapshot]:
        snapshots = []
        for target in self.targets():
            tensor = self._state[target.path]
            snapshots.append(
                TensorSnapshot(
                    tuple(target.path.split(".")),
                    target.dtype,
                    target.shape,
                    functools.partial(torch_to_array, tensor),
                    target.container,
                    param_id_of(tensor),
                )
            )
        return snapshots

    def assign(self, target: Target, array: np.ndarray[Any, Any], param_id: int | None) -> None:
        current = self._state[target.path]
        if current.is_meta:
            tensor = self._materialise(target, current, array)
        else:
            tensor = current
            dtype = from_numpy(array.dtype)
            with torch.no_grad():
                if dtype == target.dtype:
                    current.copy_(array_to_torch(array, dtype))
                else:  # the source dtype is kept: the tensor's storage is replaced
                    current.data = array_to_torch(array, dtype).to(current.device, copy=True)
            if self._device is not None and current.device != self._device:
                current.data = current.data.to(self._device)
        if param_id is not None:
            setattr(tensor, PARAM_ID_ATTRIBUTE, param_id)

    def _materialise(
        self, target: Target, current: torch.Tensor, array: np.ndarray[Any, Any]
    ) -> torch.Tensor:
        tensor = self._replaced.get(id(current))
        if tensor is None:
            if not array.flags.writeable:
                array = array.copy()  # torch would otherwise write into immutable memory
            data = array_to_torch(array, from_numpy(array.dtype))
            if self._device is not None:
                data = data.to(self._device)
            if isinstance(current, torch.nn.Parameter):
                tensor = torch.nn.Parameter(data, requires_grad=current.requires_grad)
            else:
                tensor = data
            self._replaced[id(current)] = tensor
        owner, name = self._owner(target.path)
        if name in owner._parameters:
            owner._parameters[name] = tensor  # type: ignore[assignment]
        else:
            owner._buffers[name] = tensor
        self._state[target.path] = tensor
        return tensor
