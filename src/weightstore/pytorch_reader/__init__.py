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

The reader and its parts import nothing from weightstore but `dtypes`, `errors` and
`_bytesource` (the mapped file), and never torch.
"""

from __future__ import annotations

from weightstore.pytorch_reader._format import FORMAT
from weightstore.pytorch_reader._layout import (
    DEFAULT_LIMITS,
    MAX_CONTAINER_SIZE,
    MAX_DEPTH,
    MAX_INFLATED_SIZE,
    MAX_MEMO_SIZE,
    MAX_NODES,
    MAX_PICKLE_SIZE,
    MAX_STACK_SIZE,
    MAX_STORAGE_COUNT,
    Limits,
)
from weightstore.pytorch_reader._objects import GlobalRef, InertObject, TorchDevice, TorchDType
from weightstore.pytorch_reader._opcodes import OPCODES, Opcode, iter_ops
from weightstore.pytorch_reader._reader import PytorchMetadata, PytorchReader
from weightstore.pytorch_reader._tensors import LazyTensor, TensorSlice, UnreadableTensor

__all__ = [
    "DEFAULT_LIMITS",
    "FORMAT",
    "MAX_CONTAINER_SIZE",
    "MAX_DEPTH",
    "MAX_INFLATED_SIZE",
    "MAX_MEMO_SIZE",
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
