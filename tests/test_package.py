"""The package surface; the layering rules are in test_layers.py."""

from __future__ import annotations

import subprocess
import sys

import weightstore

PUBLIC = [
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


def test_public_names() -> None:
    assert weightstore.__all__ == PUBLIC  # a change to the public surface is a deliberate act
    for name in weightstore.__all__:
        assert hasattr(weightstore, name), name


def test_import_does_not_import_torch() -> None:
    code = "import sys, weightstore, weightstore.cli; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_import_does_not_load_the_pickle_machine() -> None:
    # The registry imports the PyTorch reader's package for its FORMAT on every import; the
    # reader itself (machine, opcode table) loads only when a checkpoint is opened.
    code = (
        "import sys, weightstore; "
        "print(any(m.startswith('weightstore.pytorch_reader._') and m != "
        "'weightstore.pytorch_reader._format' and m != 'weightstore.pytorch_reader._layout' "
        "for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
