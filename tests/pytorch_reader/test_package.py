"""The public surface of `weightstore.pytorch_reader` and its errors, pinned."""

from __future__ import annotations

import subprocess
import sys

from weightstore import errors, pytorch_reader

PUBLIC = [
    "DEFAULT_LIMITS",
    "FORMAT",
    "MAX_CODE_SIZE",
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
    "QuantizedInfo",
    "QuantizedTensor",
    "TensorSlice",
    "TorchDType",
    "TorchDevice",
    "UnreadableTensor",
    "iter_ops",
]


def test_public_names_are_pinned() -> None:
    assert pytorch_reader.__all__ == PUBLIC
    for name in PUBLIC:
        assert hasattr(pytorch_reader, name), name


def test_importing_it_does_not_import_torch() -> None:
    # That it imports no other weightstore module is checked statically, for every file, by
    # tests/test_package.py (importing any submodule runs the package's own __init__).
    code = "import sys, weightstore.pytorch_reader; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_errors_it_added_sit_in_the_tree() -> None:
    assert issubclass(errors.PickleError, errors.MetadataError)
    assert issubclass(errors.MissingStorageError, errors.DescriptorError)
    assert issubclass(errors.ArchiveError, errors.FormatError)
    assert issubclass(errors.UnsupportedObjectError, errors.UnsupportedFormatError)
    assert issubclass(errors.KeyNotFoundError, errors.TensorNotFoundError)
    assert issubclass(errors.KeyNotFoundError, KeyError)
    for name in (
        "PickleError",
        "MissingStorageError",
        "ArchiveError",
        "UnsupportedObjectError",
        "KeyNotFoundError",
    ):
        assert name in errors.__all__ and name in (errors.__doc__ or ""), name
