"""weightstore: save, load, inspect and convert neural-network weights, fast and safely.

Containers (`weightstore.burnpack`, ...) know byte layouts only; the names re-exported here are
the public surface. torch is never imported by ``import weightstore``.

Each name loads its module on first use (`__getattr__`), so ``import weightstore`` costs
almost nothing, and NumPy, ml_dtypes, cbor2, tqdm and the command line load only when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from weightstore.base._version import __version__

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time `__getattr__` provides them
    from weightstore import burnpack, dtypes, formats
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
    from weightstore.formats import FORMATS, ContainerFormat, detect_format
    from weightstore.locate import open_reader
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

_ERROR_NAMES = (
    "ArchiveError", "DescriptorError", "DestinationExistsError", "DTypeError", "EntryError",
    "FileMissingError", "FormatError", "HeaderError", "InvalidOptionError", "KeyNotFoundError",
    "LimitExceeded", "MetadataError", "MissingStorageError", "PathIsDirectoryError", "PickleError",
    "RemapCollisionError", "SaveFailedError", "SliceError", "TensorNotFoundError",
    "TruncatedError", "UnsupportedFormatError", "UnsupportedObjectError",
    "UnsupportedVersionError", "WeightstoreError",
)  # fmt: skip
_STORES = "weightstore.stores"
_MODULE_SNAPSHOT = "weightstore.module_snapshot"
_RECORD = "weightstore.record"

# Each public name and the module that defines it, imported on first use of the name.
_HOME: dict[str, str] = {
    "Adapter": "weightstore.adapters",
    "ChainAdapter": "weightstore.adapters",
    "IdentityAdapter": "weightstore.adapters",
    "ApplyError": "weightstore.apply_result",
    "ApplyResult": "weightstore.apply_result",
    "to_data": "weightstore.bridge",
    "to_torch": "weightstore.bridge",
    "BurnpackReader": "weightstore.burnpack",
    "BurnpackWriter": "weightstore.burnpack",
    "Scalar": "weightstore.burnpack",
    "DType": "weightstore.dtypes",
    "TensorEntry": "weightstore.entry",
    **dict.fromkeys(_ERROR_NAMES, "weightstore.errors"),
    "FORMATS": "weightstore.formats",
    "ContainerFormat": "weightstore.container._format",
    "detect_format": "weightstore.formats",
    "open_reader": "weightstore.locate",
    "ModuleSnapshot": _MODULE_SNAPSHOT,
    "apply": _MODULE_SNAPSHOT,
    "collect": _MODULE_SNAPSHOT,
    "load_from": _MODULE_SNAPSHOT,
    "save_into": _MODULE_SNAPSHOT,
    "KeyRemapper": "weightstore.paths",
    "PathFilter": "weightstore.paths",
    "map_indices_contiguous": "weightstore.paths",
    "ModuleRecord": _RECORD,
    "into_record": _RECORD,
    "load_record": _RECORD,
    "try_load_record": _RECORD,
    "TensorSnapshot": "weightstore.snapshot",
    "BurnpackStore": _STORES,
    "LoadFailedError": _STORES,
    "PytorchStore": _STORES,
    "SafetensorsStore": _STORES,
    "Store": _STORES,
}
_SUBMODULES = frozenset({"burnpack", "dtypes", "formats"})


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and keep the name here, so the next lookup
    is an ordinary attribute."""
    if name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
