"""The weightstore exception family.

Every deliberate error derives from `WeightstoreError` and, where it fits, from the builtin it
resembles, so callers can catch ours or keep their old handlers::

    WeightstoreError
    ├── FormatError (ValueError)            a file's bytes break its format
    │   ├── HeaderError                     header too short, bad magic
    │   ├── UnsupportedVersionError         a version newer than we read
    │   ├── MetadataError                   CBOR/JSON/pickle metadata that does not decode
    │   │   └── PickleError                 a pickle stream that breaks the pickle machine's rules
    │   ├── DescriptorError                 a tensor descriptor that lies (offsets, shape, dtype)
    │   │   ├── MissingStorageError         a tensor whose storage the file does not hold
    │   │   └── QuantizedLayoutError        a quantized group's parts that disagree (scale shape)
    │   ├── LimitExceeded                   a claimed size over a reader limit
    │   ├── TruncatedError (EOFError)       the file ends before what it claims
    │   ├── ArchiveError                    the zip or tar container around the data is damaged
    │   └── SetError                        a sharded set's index or shards break the set's rules
    │       └── SetMismatchError            a shard belongs to another save than the index
    ├── UnsupportedFormatError (ValueError) a file that is not a format we read
    │   ├── NotWeightsError                 bytes that are no weights at all (an HTML page, ...)
    │   │   └── LfsPointerError             a git-lfs pointer where the file should be
    │   ├── UnsupportedObjectError          an object (quantized tensor, ...) we cannot represent
    │   │   └── QuantizedTensorError        a torch quantized tensor asked for as plain values
    │   └── CodeObjectError                 a pickle naming globals that torch.load would run
    ├── DTypeError (TypeError)              a dtype a format or an array type cannot hold
    ├── TensorNotFoundError (KeyError)      a name that is not in the file
    │   └── KeyNotFoundError                a top-level key or entry that is not in the file
    ├── EntryError (ValueError)             a writer was handed a bad tensor entry
    ├── QuantizeError (ValueError)          values a quantized block type cannot encode
    ├── InvalidOptionError (ValueError)     a builder option that cannot work (bad regex, ...)
    │   └── ModuleTypeNeededError           a module type an adapter needs, unsettled
    ├── LayoutError (ValueError)            tensors a fused-layout split or merge cannot take
    ├── RemapCollisionError (ValueError)    key remapping sends two tensors to one name
    ├── DestinationExistsError (FileExistsError)  a save would overwrite a file
    ├── SaveFailedError (OSError)           a save could not write its file (disk full, ...)
    ├── RemoteReadError (OSError)           a range request for a remote object's bytes failed
    ├── CredentialsMissingError (PermissionError)  an object store found no credentials to sign with
    ├── FileMissingError (FileNotFoundError)      a file to read does not exist
    │   └── SplitPartMissingError           a part of a split GGUF model is missing
    ├── PathIsDirectoryError (IsADirectoryError)  a directory where one file is expected
    ├── NotAFileError (OSError)             a FIFO, socket, device or symlink loop, not a file
    ├── SliceError (IndexError)             a slice index out of range or of a kind not supported
    ├── SnapshotLoadError (RuntimeError)    a snapshot's source failed or gave the wrong shape
    ├── DigestError (ValueError)            a digest that cannot be checked (algorithm, JSON)
    │   └── DigestMismatchError             a tensor's or file's bytes differ from its digest
    └── LoadFailedError (ValueError)        a load broke one of its rules; `result` is the report

    SetWarning (UserWarning)                a set's load leaves out files that look like its own

Every error and warning class the package lets out is defined in this package, by family
(`_format`: a file's bytes; `_files`: where bytes live; `_usage`: what a caller asked), and
is named from here, ``weightstore.errors.X``, in reprs and pickles too (tests/test_package.py
holds both); the exceptions that never leave a module (a pickle stand-in's refusal, ...) stay
private beside their code.

Messages follow one shape: ``<file>[, tensor '<name>']: <what went wrong>``. Facts travel as
attributes (`path`, `tensor`) so tests and callers never parse text.
"""

from __future__ import annotations

from weightstore.errors._base import MAX_NAME_IN_MESSAGE as MAX_NAME_IN_MESSAGE
from weightstore.errors._base import WeightstoreError
from weightstore.errors._files import (
    CredentialsMissingError,
    DestinationExistsError,
    FileMissingError,
    NotAFileError,
    PathIsDirectoryError,
    RemoteReadError,
    SaveFailedError,
    SplitPartMissingError,
)
from weightstore.errors._format import (
    ArchiveError,
    CodeObjectError,
    DescriptorError,
    FormatError,
    HeaderError,
    LfsPointerError,
    LimitExceeded,
    MetadataError,
    MissingStorageError,
    NotWeightsError,
    PickleError,
    QuantizedLayoutError,
    QuantizedTensorError,
    SetError,
    SetMismatchError,
    TruncatedError,
    UnsupportedFormatError,
    UnsupportedObjectError,
    UnsupportedVersionError,
)
from weightstore.errors._format import (
    unfinished_download as unfinished_download,
)
from weightstore.errors._usage import (
    DigestError,
    DigestMismatchError,
    DTypeError,
    EntryError,
    InvalidOptionError,
    KeyNotFoundError,
    LayoutError,
    LoadFailedError,
    ModuleTypeNeededError,
    QuantizeError,
    RemapCollisionError,
    SetWarning,
    SliceError,
    SnapshotLoadError,
    TensorNotFoundError,
)

__all__ = [
    "ArchiveError",
    "CodeObjectError",
    "CredentialsMissingError",
    "DTypeError",
    "DescriptorError",
    "DestinationExistsError",
    "DigestError",
    "DigestMismatchError",
    "EntryError",
    "FileMissingError",
    "FormatError",
    "HeaderError",
    "InvalidOptionError",
    "KeyNotFoundError",
    "LayoutError",
    "LfsPointerError",
    "LimitExceeded",
    "LoadFailedError",
    "MetadataError",
    "MissingStorageError",
    "ModuleTypeNeededError",
    "NotAFileError",
    "NotWeightsError",
    "PathIsDirectoryError",
    "PickleError",
    "QuantizeError",
    "QuantizedLayoutError",
    "QuantizedTensorError",
    "RemapCollisionError",
    "RemoteReadError",
    "SaveFailedError",
    "SetError",
    "SetMismatchError",
    "SetWarning",
    "SliceError",
    "SnapshotLoadError",
    "SplitPartMissingError",
    "TensorNotFoundError",
    "TruncatedError",
    "UnsupportedFormatError",
    "UnsupportedObjectError",
    "UnsupportedVersionError",
    "WeightstoreError",
]


for _name in __all__:  # one public home: reprs, pickles and docs say weightstore.errors.X
    globals()[_name].__module__ = __name__
del _name
