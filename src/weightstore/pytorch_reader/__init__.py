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

The reader and its parts import nothing from weightstore but `dtypes`, `errors`, `io` (the
mapped file), `container._format` (the registry's record type) and the standard-library-only
parts of `base` (bounded rendering of file content for messages, lazy exports, ...), and never
torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightstore.base._lazy import lazy_exports
from weightstore.pytorch_reader._format import FORMAT as FORMAT
from weightstore.pytorch_reader._layout import DEFAULT_LIMITS as DEFAULT_LIMITS
from weightstore.pytorch_reader._layout import MAX_CODE_SIZE as MAX_CODE_SIZE
from weightstore.pytorch_reader._layout import MAX_CONTAINER_SIZE as MAX_CONTAINER_SIZE
from weightstore.pytorch_reader._layout import MAX_DEPTH as MAX_DEPTH
from weightstore.pytorch_reader._layout import MAX_EXPANDED_SIZE as MAX_EXPANDED_SIZE
from weightstore.pytorch_reader._layout import MAX_INFLATED_SIZE as MAX_INFLATED_SIZE
from weightstore.pytorch_reader._layout import MAX_MEMO_SIZE as MAX_MEMO_SIZE
from weightstore.pytorch_reader._layout import MAX_NAMES_SIZE as MAX_NAMES_SIZE
from weightstore.pytorch_reader._layout import MAX_NODES as MAX_NODES
from weightstore.pytorch_reader._layout import MAX_PICKLE_SIZE as MAX_PICKLE_SIZE
from weightstore.pytorch_reader._layout import MAX_STACK_SIZE as MAX_STACK_SIZE
from weightstore.pytorch_reader._layout import MAX_STORAGE_COUNT as MAX_STORAGE_COUNT
from weightstore.pytorch_reader._layout import Limits as Limits

if TYPE_CHECKING:  # the lazy part of the table below, as type checkers see it
    from weightstore.pytorch_reader._objects import GlobalRef as GlobalRef
    from weightstore.pytorch_reader._objects import InertObject as InertObject
    from weightstore.pytorch_reader._objects import TorchDevice as TorchDevice
    from weightstore.pytorch_reader._objects import TorchDType as TorchDType
    from weightstore.pytorch_reader._opcodes import OPCODES as OPCODES
    from weightstore.pytorch_reader._opcodes import Opcode as Opcode
    from weightstore.pytorch_reader._opcodes import iter_ops as iter_ops
    from weightstore.pytorch_reader._qtensor import QuantizedInfo as QuantizedInfo
    from weightstore.pytorch_reader._qtensor import QuantizedTensor as QuantizedTensor
    from weightstore.pytorch_reader._reader import PytorchMetadata as PytorchMetadata
    from weightstore.pytorch_reader._reader import PytorchReader as PytorchReader
    from weightstore.pytorch_reader._tensors import LazyTensor as LazyTensor
    from weightstore.pytorch_reader._tensors import TensorSlice as TensorSlice
    from weightstore.pytorch_reader._tensors import UnreadableTensor as UnreadableTensor

# The reader itself (pickle machine, opcode table, archive loaders) loads on first use: the
# format registry imports this package for `FORMAT` on every ``import weightstore``, and most
# programs never open a checkpoint.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "FORMAT": "weightstore.pytorch_reader._format",
        **dict.fromkeys(
            (
                "DEFAULT_LIMITS", "MAX_CODE_SIZE", "MAX_CONTAINER_SIZE", "MAX_DEPTH",
                "MAX_EXPANDED_SIZE",
                "MAX_INFLATED_SIZE", "MAX_MEMO_SIZE", "MAX_NAMES_SIZE", "MAX_NODES",
                "MAX_PICKLE_SIZE", "MAX_STACK_SIZE", "MAX_STORAGE_COUNT", "Limits",
            ),
            "weightstore.pytorch_reader._layout",
        ),
        **dict.fromkeys(
            ("GlobalRef", "InertObject", "TorchDevice", "TorchDType"),
            "weightstore.pytorch_reader._objects",
        ),
        **dict.fromkeys(("OPCODES", "Opcode", "iter_ops"), "weightstore.pytorch_reader._opcodes"),
        **dict.fromkeys(("PytorchMetadata", "PytorchReader"), "weightstore.pytorch_reader._reader"),
        **dict.fromkeys(
            ("QuantizedInfo", "QuantizedTensor"), "weightstore.pytorch_reader._qtensor"
        ),
        **dict.fromkeys(
            ("LazyTensor", "TensorSlice", "UnreadableTensor"),
            "weightstore.pytorch_reader._tensors",
        ),
    },
)  # fmt: skip
