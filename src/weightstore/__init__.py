"""weightstore: save, load, inspect and convert neural-network weights, fast and safely.

Containers (`weightstore.burnpack`, ...) know byte layouts only; the names re-exported here are
the public surface. torch is never imported by ``import weightstore``.

`_EXPORTS` is the one table of the surface: each name and the module that defines it, loaded
on the name's first use (`weightstore.base._lazy`), so ``import weightstore`` costs almost
nothing, and NumPy, ml_dtypes, cbor2, tqdm and the command line load only when used. The
``TYPE_CHECKING`` block is the same table for type checkers; a test holds the two equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightstore.base import __version__ as __version__
from weightstore.base._lazy import lazy_exports

if TYPE_CHECKING:  # the table below, as type checkers and IDEs see it
    from weightstore import burnpack as burnpack
    from weightstore import dtypes as dtypes
    from weightstore import formats as formats
    from weightstore import gguf as gguf
    from weightstore import pytorch_reader as pytorch_reader
    from weightstore import safetensors as safetensors
    from weightstore.adapters import Adapter as Adapter
    from weightstore.adapters import ChainAdapter as ChainAdapter
    from weightstore.adapters import IdentityAdapter as IdentityAdapter
    from weightstore.bridge import to_data as to_data
    from weightstore.bridge import to_torch as to_torch
    from weightstore.burnpack import BurnpackReader as BurnpackReader
    from weightstore.burnpack import BurnpackWriter as BurnpackWriter
    from weightstore.burnpack import Scalar as Scalar
    from weightstore.container._format import ContainerFormat as ContainerFormat
    from weightstore.dtypes import DType as DType
    from weightstore.entry import TensorEntry as TensorEntry
    from weightstore.errors import ArchiveError as ArchiveError
    from weightstore.errors import CodeObjectError as CodeObjectError
    from weightstore.errors import CredentialsMissingError as CredentialsMissingError
    from weightstore.errors import DescriptorError as DescriptorError
    from weightstore.errors import DestinationExistsError as DestinationExistsError
    from weightstore.errors import DigestError as DigestError
    from weightstore.errors import DigestMismatchError as DigestMismatchError
    from weightstore.errors import DTypeError as DTypeError
    from weightstore.errors import EntryError as EntryError
    from weightstore.errors import FileMissingError as FileMissingError
    from weightstore.errors import FormatError as FormatError
    from weightstore.errors import HeaderError as HeaderError
    from weightstore.errors import InvalidOptionError as InvalidOptionError
    from weightstore.errors import KeyNotFoundError as KeyNotFoundError
    from weightstore.errors import LayoutError as LayoutError
    from weightstore.errors import LfsPointerError as LfsPointerError
    from weightstore.errors import LimitExceeded as LimitExceeded
    from weightstore.errors import LoadFailedError as LoadFailedError
    from weightstore.errors import MetadataError as MetadataError
    from weightstore.errors import MissingStorageError as MissingStorageError
    from weightstore.errors import ModuleTypeNeededError as ModuleTypeNeededError
    from weightstore.errors import NotAFileError as NotAFileError
    from weightstore.errors import NotWeightsError as NotWeightsError
    from weightstore.errors import PathIsDirectoryError as PathIsDirectoryError
    from weightstore.errors import PickleError as PickleError
    from weightstore.errors import QuantizedLayoutError as QuantizedLayoutError
    from weightstore.errors import QuantizedTensorError as QuantizedTensorError
    from weightstore.errors import QuantizeError as QuantizeError
    from weightstore.errors import RemapCollisionError as RemapCollisionError
    from weightstore.errors import RemoteReadError as RemoteReadError
    from weightstore.errors import SaveFailedError as SaveFailedError
    from weightstore.errors import SetError as SetError
    from weightstore.errors import SetMismatchError as SetMismatchError
    from weightstore.errors import SetWarning as SetWarning
    from weightstore.errors import SliceError as SliceError
    from weightstore.errors import SnapshotLoadError as SnapshotLoadError
    from weightstore.errors import SplitPartMissingError as SplitPartMissingError
    from weightstore.errors import TensorNotFoundError as TensorNotFoundError
    from weightstore.errors import TruncatedError as TruncatedError
    from weightstore.errors import UnsupportedFormatError as UnsupportedFormatError
    from weightstore.errors import UnsupportedObjectError as UnsupportedObjectError
    from weightstore.errors import UnsupportedVersionError as UnsupportedVersionError
    from weightstore.errors import WeightstoreError as WeightstoreError
    from weightstore.formats import FORMATS as FORMATS
    from weightstore.formats import detect_format as detect_format
    from weightstore.gguf import GgufReader as GgufReader
    from weightstore.gguf import GgufSplitReader as GgufSplitReader
    from weightstore.gguf import GgufWriter as GgufWriter
    from weightstore.locate import open_reader as open_reader
    from weightstore.module_snapshot import ModuleSnapshot as ModuleSnapshot
    from weightstore.module_snapshot import apply as apply
    from weightstore.module_snapshot import collect as collect
    from weightstore.module_snapshot import load_from as load_from
    from weightstore.module_snapshot import save_into as save_into
    from weightstore.paths import KeyRemapper as KeyRemapper
    from weightstore.paths import PathFilter as PathFilter
    from weightstore.paths import map_indices_contiguous as map_indices_contiguous
    from weightstore.pytorch_reader import PytorchReader as PytorchReader
    from weightstore.record import ModuleRecord as ModuleRecord
    from weightstore.record import into_record as into_record
    from weightstore.record import load_record as load_record
    from weightstore.record import try_load_record as try_load_record
    from weightstore.report import ApplyError as ApplyError
    from weightstore.report import ApplyResult as ApplyResult
    from weightstore.safetensors import SafetensorsReader as SafetensorsReader
    from weightstore.safetensors import SafetensorsWriter as SafetensorsWriter
    from weightstore.snapshot import TensorSnapshot as TensorSnapshot
    from weightstore.stores import BurnpackStore as BurnpackStore
    from weightstore.stores import GgufStore as GgufStore
    from weightstore.stores import PytorchStore as PytorchStore
    from weightstore.stores import SafetensorsStore as SafetensorsStore
    from weightstore.stores import Store as Store

# Every public name and the module that defines it: the public module a user would import it
# from. The submodules named below are attributes on first use too: every container package
# (as every container reader and writer is a name here), the dtype table and the registry.
_EXPORTS: dict[str, str] = {
    "__version__": "weightstore.base",
    **dict.fromkeys(("Adapter", "ChainAdapter", "IdentityAdapter"), "weightstore.adapters"),
    **dict.fromkeys(("ApplyError", "ApplyResult"), "weightstore.report"),
    **dict.fromkeys(("to_data", "to_torch"), "weightstore.bridge"),
    **dict.fromkeys(("BurnpackReader", "BurnpackWriter", "Scalar"), "weightstore.burnpack"),
    "ContainerFormat": "weightstore.container._format",
    "DType": "weightstore.dtypes",
    "TensorEntry": "weightstore.entry",
    **dict.fromkeys(
        (
            "ArchiveError", "CodeObjectError", "CredentialsMissingError", "DTypeError",
            "DescriptorError",
            "DestinationExistsError", "DigestError", "DigestMismatchError",
            "EntryError", "FileMissingError", "FormatError", "HeaderError", "InvalidOptionError",
            "KeyNotFoundError", "LayoutError", "LfsPointerError", "LimitExceeded",
            "LoadFailedError",
            "MetadataError",
            "MissingStorageError", "ModuleTypeNeededError", "NotAFileError",
            "NotWeightsError",
            "PathIsDirectoryError",
            "PickleError", "QuantizeError", "QuantizedLayoutError", "QuantizedTensorError",
            "RemapCollisionError",
            "RemoteReadError", "SaveFailedError", "SetError", "SetMismatchError", "SetWarning",
            "SliceError", "SnapshotLoadError", "SplitPartMissingError", "TensorNotFoundError",
            "TruncatedError",
            "UnsupportedFormatError", "UnsupportedObjectError", "UnsupportedVersionError",
            "WeightstoreError",
        ),
        "weightstore.errors",
    ),
    **dict.fromkeys(("FORMATS", "detect_format"), "weightstore.formats"),
    **dict.fromkeys(("GgufReader", "GgufSplitReader", "GgufWriter"), "weightstore.gguf"),
    "open_reader": "weightstore.locate",
    **dict.fromkeys(
        ("ModuleSnapshot", "apply", "collect", "load_from", "save_into"),
        "weightstore.module_snapshot",
    ),
    **dict.fromkeys(("KeyRemapper", "PathFilter", "map_indices_contiguous"), "weightstore.paths"),
    "PytorchReader": "weightstore.pytorch_reader",
    **dict.fromkeys(
        ("ModuleRecord", "into_record", "load_record", "try_load_record"), "weightstore.record"
    ),
    **dict.fromkeys(("SafetensorsReader", "SafetensorsWriter"), "weightstore.safetensors"),
    "TensorSnapshot": "weightstore.snapshot",
    **dict.fromkeys(
        ("BurnpackStore", "GgufStore", "PytorchStore", "SafetensorsStore", "Store"),
        "weightstore.stores"
    ),
}  # fmt: skip

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    _EXPORTS,
    submodules=("burnpack", "dtypes", "formats", "gguf", "pytorch_reader", "safetensors"),
)
