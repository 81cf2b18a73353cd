"""weightstore: save, load, inspect and convert neural-network weights, fast and safely.

Containers (`weightstore.burnpack`, ...) know byte layouts only; the names re-exported here are
the public surface. torch is never imported by ``import weightstore``.
"""

from __future__ import annotations

from weightstore import burnpack, dtypes
from weightstore.burnpack import BurnpackReader, BurnpackWriter, Scalar
from weightstore.detect import detect_format
from weightstore.dtypes import DType
from weightstore.entry import TensorEntry
from weightstore.errors import (
    DescriptorError,
    DestinationExistsError,
    DTypeError,
    EntryError,
    FormatError,
    HeaderError,
    LimitExceeded,
    MetadataError,
    TensorNotFoundError,
    TruncatedError,
    UnsupportedFormatError,
    UnsupportedVersionError,
    WeightstoreError,
)

__version__ = "0.1.0"

__all__ = [
    "BurnpackReader",
    "BurnpackWriter",
    "DType",
    "DTypeError",
    "DescriptorError",
    "DestinationExistsError",
    "EntryError",
    "FormatError",
    "HeaderError",
    "LimitExceeded",
    "MetadataError",
    "Scalar",
    "TensorEntry",
    "TensorNotFoundError",
    "TruncatedError",
    "UnsupportedFormatError",
    "UnsupportedVersionError",
    "WeightstoreError",
    "__version__",
    "burnpack",
    "detect_format",
    "dtypes",
]
