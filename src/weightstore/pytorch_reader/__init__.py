"""Read PyTorch checkpoints (``.pt``, ``.pth``, ``.bin``) with NumPy alone, and run nothing.

`PytorchReader` lists and reads the tensors of every layout `torch.save` has written: zip
(torch >= 1.6), legacy (``_use_new_zipfile_serialization=False``) and tar (torch < 0.1.10),
little- or big-endian. Its pickle is interpreted by a symbolic machine that never imports or
calls anything the file names: known constructors (tensor rebuilds, ``OrderedDict``, ``set``,
``torch.Size``, NumPy arrays, ...) get safe stand-ins, everything else becomes an inert record.
So whole-module saves read, hostile pickles do nothing, and resource limits stop the ones that
try to exhaust memory or time.

    >>> from weightstore.pytorch_reader import PytorchReader
    >>> reader = PytorchReader.from_file("checkpoint.pt", top_level_key="model")  # doctest: +SKIP
    >>> with reader as ckpt:  # doctest: +SKIP
    ...     ckpt.names()                        # ['fc1.weight', 'fc1.bias', ...]
    ...     ckpt.get("fc1.weight")              # a NumPy view of the mapped file
    ...     ckpt.tensor("fc1.weight").shape     # dtype, shape and size; nothing read
    ...     ckpt.load_object("config")          # plain Python values

The reader and its parts import nothing from weightstore but `dtypes`, `errors`, `_bytesource`
(the mapped file), `_format` (the registry's record type) and `_render` (bounded rendering of
file content for messages), and never torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from weightstore.pytorch_reader._format import FORMAT
from weightstore.pytorch_reader._layout import (
    DEFAULT_LIMITS,
    MAX_CONTAINER_SIZE,
    MAX_DEPTH,
    MAX_EXPANDED_SIZE,
    MAX_INFLATED_SIZE,
    MAX_MEMO_SIZE,
    MAX_NAMES_SIZE,
    MAX_NODES,
    MAX_PICKLE_SIZE,
    MAX_STACK_SIZE,
    MAX_STORAGE_COUNT,
    Limits,
)

if TYPE_CHECKING:
    from weightstore.pytorch_reader._objects import (
        GlobalRef,
        InertObject,
        TorchDevice,
        TorchDType,
    )
    from weightstore.pytorch_reader._opcodes import OPCODES, Opcode, iter_ops
    from weightstore.pytorch_reader._reader import PytorchMetadata, PytorchReader
    from weightstore.pytorch_reader._tensors import LazyTensor, TensorSlice, UnreadableTensor

# The reader itself (pickle machine, opcode table, archive loaders) loads on first use: the
# format registry imports this package for `FORMAT` on every ``import weightstore``, and most
# programs never open a checkpoint.
_LAZY = {
    "GlobalRef": "_objects", "InertObject": "_objects", "TorchDevice": "_objects",
    "TorchDType": "_objects", "OPCODES": "_opcodes", "Opcode": "_opcodes",
    "iter_ops": "_opcodes", "PytorchMetadata": "_reader", "PytorchReader": "_reader",
    "LazyTensor": "_tensors", "TensorSlice": "_tensors", "UnreadableTensor": "_tensors",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DEFAULT_LIMITS",
    "FORMAT",
    "MAX_CONTAINER_SIZE",
    "MAX_DEPTH",
    "MAX_EXPANDED_SIZE",
    "MAX_INFLATED_SIZE",
    "MAX_MEMO_SIZE",
    "MAX_NAMES_SIZE",
    "MAX_NODES",
    "MAX_PICKLE_SIZE",
    "MAX_STACK_SIZE",
    "MAX_STORAGE_COUNT",
    "OPCODES",
    "GlobalRef",
    "InertObject",
    "LazyTensor",
    "Limits",
    "Opcode",
    "PytorchMetadata",
    "PytorchReader",
    "TensorSlice",
    "TorchDType",
    "TorchDevice",
    "UnreadableTensor",
    "iter_ops",
]
