"""The three layouts `torch.save` has used, and every limit the reader enforces.

**Zip** (torch >= 1.6, the default). A zip archive whose entries all sit under one folder,
``<archive>/``, named after the file when it was saved::

    <archive>/data.pkl               the pickled object; tensors appear as persistent ids
                                     ("storage", <torch.XStorage class>, key, location, numel)
    <archive>/data/<key>             one entry per storage: numel x element size raw bytes,
                                     stored (not deflated), aligned to .storage_alignment
    <archive>/byteorder              "little" or "big"; absent in old files (= little)
    <archive>/.format_version        "1": storages are numbered in the order they are saved
    <archive>/.storage_alignment     "64": alignment of each data/<key> payload
    <archive>/version                "3": the zip writer's record-format version
    <archive>/.data/serialization_id a random id; recorded, not used

  A TorchScript archive (`torch.jit.save`) is also such a zip, with ``constants.pkl`` and
  ``code/``; its module's tensors are read without running that code (`_torchscript`). A
  `torch.package` archive has ``.data/extern_modules`` and is refused: loading it means running
  its code.

**Legacy** (``_use_new_zipfile_serialization=False``, torch 0.1.10 to 1.5). Pickles back to
back, then the raw storages::

    pickle  MAGIC_NUMBER (0x1950a86a20f9469cfc6c)
    pickle  PROTOCOL_VERSION (1001)
    pickle  sys_info  {"protocol_version", "little_endian", "type_sizes"}
    pickle  the object; persistent ids ("storage", class, root_key, location, numel, view)
            or ("module", class, source_file, source) for whole-module saves
    pickle  the storage keys, sorted, as a list of strings
    then for each key in that order:  u64 numel, numel x element size raw bytes

**Tar** (torch < 0.1.10). An uncompressed tar with four entries::

    sys_info   pickle, as above
    storages   pickle N; N x [pickle (key, location, class), u64 numel, raw bytes];
               then, optionally, pickle [(view_key, root_key, offset, numel), ...]
    tensors    pickle N; N x [pickle (key, storage_key, type name), i32 ndim, 4 pad bytes,
               ndim x i64 size, ndim x i64 stride, i64 storage_offset]
    pickle     the object; persistent ids are the string keys of tensors and storages

Storage bytes in the legacy and tar layouts are little-endian on every machine: torch's
``THPStorage_writeFileRaw`` converts on big-endian hosts, and its reader converts back. Only the
u64 counts were once written in native order, so a file whose ``sys_info`` says big-endian may
carry big-endian counts; both orders are accepted when they agree with the pickle. A zip file
whose ``byteorder`` record says "big" holds big-endian storage bytes, swapped on read.

Limits (`Limits`) bound every resource a hostile pickle could claim. Each is checked before the
allocation it guards, and a reader given a file that trips one fails with `LimitExceeded`.
"""

from __future__ import annotations

import struct
import sys
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.errors import InvalidOptionError

# -- signatures and records ---------------------------------------------------------------------
ZIP_MAGIC: Final = b"PK\x03\x04"
ZIP_EMPTY_MAGIC: Final = b"PK\x05\x06"  # an archive with no entries at all
TAR_MAGIC: Final = b"ustar"
TAR_MAGIC_OFFSET: Final = 257  # the "magic" field of a POSIX tar header
PICKLE_PROTO: Final = 0x80  # protocol 2+ pickles start with PROTO

MAGIC_NUMBER: Final = 0x1950A86A20F9469CFC6C  # the legacy layout's first pickle
PROTOCOL_VERSION: Final = 1001  # the legacy layout's second pickle
HIGHEST_PICKLE_PROTOCOL: Final = 5

DATA_PKL: Final = "data.pkl"
STORAGE_FOLDER: Final = "data/"
BYTEORDER_RECORD: Final = "byteorder"
FORMAT_VERSION_RECORD: Final = ".format_version"
ALIGNMENT_RECORD: Final = ".storage_alignment"
VERSION_RECORD: Final = "version"
SERIALIZATION_ID_RECORD: Final = ".data/serialization_id"
TORCHSCRIPT_MARKERS: Final = ("constants.pkl", "code/")  # torch.jit.save archives
TORCH_PACKAGE_MARKER: Final = ".data/extern_modules"  # torch.package archives
TAR_ENTRIES: Final = ("sys_info", "pickle", "storages", "tensors")

COUNT: Final = struct.Struct("<q")  # the u64 numel before each legacy/tar storage
COUNT_BE: Final = struct.Struct(">q")
ZIP_LOCAL_HEADER: Final = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
ZIP_LOCAL_HEADER_SIZE: Final = 30
# An LZMA member starts with a 4-byte zip header, then the 5-byte LZMA properties: a coding byte
# and the dictionary size (u32). The decompressor allocates that dictionary before inflating a
# byte, so a 1-byte record could reserve 4 GiB; 64 MiB is the largest xz/LZMA preset (-9).
# torch never writes LZMA members.
LZMA_PROPERTIES: Final = struct.Struct("<2xHBI")  # properties size, coding byte, dictionary size
MAX_LZMA_DICTIONARY_SIZE: Final = 2**26
TAR_TENSOR_NDIM: Final = struct.Struct("<i4x")  # ndim, then 4 bytes once part of an i64 ndim

# -- limits ------------------------------------------------------------------------------------
# Defaults sit far above anything torch writes for real models and far below what would exhaust
# a machine. A caller raises one with a keyword argument only for files it trusts.
MAX_PICKLE_SIZE: Final = 2**30
"""Bytes in one pickle stream; whole-model pickles are a few MB."""
MAX_MEMO_SIZE: Final = 2**22
"""Memo entries; a 100k-tensor state dict uses about 1.5 million."""
MAX_STACK_SIZE: Final = 2**24
"""Items on the pickle stack, all open marks together."""
MAX_CONTAINER_SIZE: Final = 2**24
"""Items in one list, tuple, dict or set."""
MAX_DEPTH: Final = 256
"""Open marks; nesting of tuple keys (CPython hashes them recursively in C and crashes past
about 100k levels); nesting walked when naming tensors."""
MAX_NODES: Final = 2**24
"""Opcodes run plus key elements hashed plus items constructors walk (``set(x)`` called a
hundred times on one shared list), per pickle (about a million a second, so some 15 s at worst:
a 40 MB pickle); and, separately, values visited and module entries scanned while naming
tensors, where shared references can multiply paths exponentially."""
MAX_STORAGE_COUNT: Final = 2**20
"""Storages or tensors listed by a legacy or tar file."""
MAX_INFLATED_SIZE: Final = 2**32
"""Bytes one compressed zip entry may inflate to; torch never compresses, so only hand-made
archives reach this."""
MAX_NAMES_SIZE: Final = 2**26
"""Bytes (UTF-8) of all tensor names together; a 100k-tensor model uses about 10 MB. Shared
references let a file name one tensor many times: 20,000 copies under one 1 MiB key are 20 GB of
names from a 1 MiB pickle, and a 477-byte list of lists with 2**40 paths to one tensor names it
at every path (this limit stops that one after some 800,000 names, in seconds)."""
MAX_CODE_SIZE: Final = 2**24
"""Bytes of TorchScript source (the code/ files a TorchScript archive's classes are read from),
all files read from one archive together. The code is text that only declares which attributes
are parameters and buffers; a scripted 48-layer transformer has 90 KB of it in all, a traced
one (a class per submodule) 180 KB. Without this bound, a 1 MB archive whose code/ file
inflates to 1 GB of newlines cost 10 GB of memory to split into lines."""
MAX_EXPANDED_SIZE: Final = 2**32
"""Bytes of one tensor whose view repeats its storage's elements (stride 0, overlapping
strides), so that reading it copies more bytes than the file holds: ``x.expand(2**20, 2**20)``
of one float is 4 TiB from 4 bytes. Views no bigger than their storage are not limited."""

# Not options: what the format is, what NumPy and CPython can hold, whatever the caller trusts.
MAX_RECORD_SIZE: Final = 4096
"""Bytes of a small text record (byteorder, .format_version, .storage_alignment, version,
.data/serialization_id); torch writes a few bytes in each."""
# Plain values (NumPy 2's, the floor pyproject pins), equal to `_reader_base`'s MAX_DIMS and
# MAX_ARRAY_SIZE; not imported from there, so the format registry stays free of readers.
MAX_NDIM: Final = 64
"""Dimensions of a tensor NumPy can hold (NPY_MAXDIMS). torch allows more; such a tensor is
listed and refused when touched."""
MAX_ARRAY_SIZE: Final = sys.maxsize
"""Bytes a NumPy array may span (ssize_t): itemsize times every non-zero dimension, so even a
zero-element (0, 2**62) float32 tensor is too big for NumPy."""
MAX_HASH_SHARERS: Final = 64
"""Distinct non-string keys with one hash value (ints ``k * (2**61 - 1)`` all hash alike and
would make dict inserts quadratic)."""
MAX_DIGITS: Final = 4300
"""Decimal digits in a text-form integer; CPython's own default cap."""
MAX_LONG_SIZE: Final = MAX_DIGITS * 2 // 5
"""Bytes of a binary LONG4 integer: 1,720 bytes are at most 4,143 digits (2.41 a byte), so
every int a pickle holds prints within CPython's 4,300-digit cap. LONG1 stops at 255 bytes."""
MAX_LINE_SIZE: Final = 2**16
"""Bytes in one text-form argument line of a number or name."""
MAX_ARCHIVES_COUNTED: Final = 4096
"""Zip archives counted back to back before the one a file's reader reads (`_extent`, for
``verify``): each costs a read of its central directory, and a file of 22-byte empty archives
would otherwise cost one per 22 bytes. A DCP rank file holds one archive per item its rank
saved (a few per tensor shard set, hundreds at most); past the limit the count says "at least"."""
MAX_BUILT_RATIO: Final = 4
"""Bytes the constructors of one pickle may build (NumPy arrays, ``bytes``, encoded strings),
as a multiple of the pickle's own size, plus BUILT_SIZE_SLACK. A pickle builds each blob it holds
once or twice (protocol 2 ``bytes`` are text encoded back, then copied into an array); only
calls repeated on one shared blob build more: 3,000 ``bytearray`` copies of one 1 MiB string
are 3 GB from a 1 MiB pickle."""
BUILT_SIZE_SLACK: Final = 2**20
"""Bytes any pickle may build besides MAX_BUILT_RATIO times its size."""


class Limits(ValueRecord):
    """The resource caps one reader applies; every field defaults to the constant of that name.

    Immutable and compared field by field (a `ValueRecord`: this module loads with the format
    registry, and generating a dataclass costs more at import than it saves).

    Raises:
        InvalidOptionError: a field that is not a positive integer; raised at construction.
    """

    max_pickle_size: int = MAX_PICKLE_SIZE
    max_memo_size: int = MAX_MEMO_SIZE
    max_stack_size: int = MAX_STACK_SIZE
    max_container_size: int = MAX_CONTAINER_SIZE
    max_depth: int = MAX_DEPTH
    max_nodes: int = MAX_NODES
    max_storage_count: int = MAX_STORAGE_COUNT
    max_inflated_size: int = MAX_INFLATED_SIZE
    max_names_size: int = MAX_NAMES_SIZE
    max_expanded_size: int = MAX_EXPANDED_SIZE
    max_code_size: int = MAX_CODE_SIZE

    def __post_init__(self) -> None:
        for name in self._FIELDS:
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise InvalidOptionError(f"{name} must be a positive int, not {value!r}")


DEFAULT_LIMITS: Final = Limits()
"""Every limit at its default, the constant of its name."""
