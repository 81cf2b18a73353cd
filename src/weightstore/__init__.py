"""weightstore: save, load, inspect and convert neural-network weights, fast and safely.

Containers (`weightstore.burnpack`, ...) know byte layouts only; the names re-exported here are
the public surface. torch is never imported by ``import weightstore``.
"""

from __future__ import annotations

from weightstore import burnpack, dtypes, formats
from weightstore._version import __version__
from weightstore.adapters import Adapter, ChainAdapter, IdentityAdapter
from weightstore.apply_result import ApplyError, ApplyResult
from weightstore.bridge import to_data, to_torch
from weightstore.burnpack import BurnpackReader, BurnpackWriter, Scalar
from weightstore.dtypes import DType
from weightstore.entry import TensorEntry
from weightstore.errors import (
    ArchiveError,
    DescriptorError,
    DestinationExistsError,
    DTypeError,
    EntryError,
    FileMissingError,
    FormatError,
    HeaderError,
    InvalidOptionError,
    KeyNotFoundError,
    LimitExceeded,
    MetadataError,
    MissingStorageError,
    PathIsDirectoryError,
    PickleError,
    RemapCollisionError,
    SaveFailedError,
    SliceError,
    TensorNotFoundError,
    TruncatedError,
    UnsupportedFormatError,
    UnsupportedObjectError,
    UnsupportedVersionError,
    WeightstoreError,
)
from weightstore.formats import FORMATS, ContainerFormat, detect_format, open_reader
from weightstore.module_snapshot import ModuleSnapshot, apply, collect, load_from, save_into
from weightstore.paths import KeyRemapper, PathFilter, map_indices_contiguous
from weightstore.record import ModuleRecord, into_record, load_record, try_load_record
from weightstore.snapshot import TensorSnapshot
from weightstore.stores import (
    BurnpackStore,
    LoadFailedError,
    PytorchStore,
    SafetensorsStore,
    Store,
)

__all__ = [
    "FORMATS",
    "Adapter",
    "ApplyError",
    "ApplyResult",
    "ArchiveError",
    "BurnpackReader",
    "BurnpackStore",
    "BurnpackWriter",
    "ChainAdapter",
    "ContainerFormat",
    "DType",
    "DTypeError",
    "DescriptorError",
    "DestinationExistsError",
    "EntryError",
    "FileMissingError",
    "FormatError",
    "HeaderError",
    "IdentityAdapter",
    "InvalidOptionError",
    "KeyNotFoundError",
    "KeyRemapper",
    "LimitExceeded",
    "LoadFailedError",
    "MetadataError",
    "MissingStorageError",
    "ModuleRecord",
    "ModuleSnapshot",
    "PathFilter",
    "PathIsDirectoryError",
    "PickleError",
    "PytorchStore",
    "RemapCollisionError",
    "SafetensorsStore",
    "SaveFailedError",
    "Scalar",
    "SliceError",
    "Store",
    "TensorEntry",
    "TensorNotFoundError",
    "TensorSnapshot",
    "TruncatedError",
    "UnsupportedFormatError",
    "UnsupportedObjectError",
    "UnsupportedVersionError",
    "WeightstoreError",
    "__version__",
    "apply",
    "burnpack",
    "collect",
    "detect_format",
    "dtypes",
    "formats",
    "into_record",
    "load_from",
    "load_record",
    "map_indices_contiguous",
    "open_reader",
    "save_into",
    "to_data",
    "to_torch",
    "try_load_record",
]
