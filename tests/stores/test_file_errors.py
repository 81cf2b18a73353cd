"""A missing file or a directory where a store or reader expects one file: typed errors.

`FileMissingError` is a `FileNotFoundError` and `PathIsDirectoryError` an `IsADirectoryError`,
both `WeightstoreError`s with the path as a field (and `errno`/`filename` as the builtins set
them). A store cannot know at `from_file` whether a missing path is a save target, so that
error comes at the first read; a directory can never be a one-file store, so that one comes at
once (except a burnpack path without an extension, whose saves go to ``<path>.bpk``).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import (
    BurnpackStore,
    PytorchStore,
    SafetensorsStore,
    Store,
    WeightstoreError,
    load_from,
    save_into,
)
from weightstore.burnpack import BurnpackReader
from weightstore.errors import (
    FileMissingError,
    PathIsDirectoryError,
    SetError,
    UnsupportedFormatError,
)
from weightstore.io._open import open_source
from weightstore.safetensors import SafetensorsReader

# store, the name given, the file a read opens (the extension rule applied)
MISSING: dict[str, tuple[Callable[[Path], Any], str, str]] = {
    "burnpack": (BurnpackStore.from_file, "model", "model.bpk"),
    "burnpack-named": (BurnpackStore.from_file, "model.bpk", "model.bpk"),
    "burnpack-as-written": (
        lambda path: BurnpackStore.from_file(path).auto_extension(False), "model", "model",
    ),
    "safetensors": (SafetensorsStore.from_file, "model.safetensors", "model.safetensors"),
    "pytorch": (PytorchStore.from_file, "model.pt", "model.pt"),
    "store-by-extension": (Store.from_file, "model.safetensors", "model.safetensors"),
}  # fmt: skip

READS: dict[str, Callable[[Any], object]] = {
    "keys": lambda store: store.keys(),
    "read_metadata": lambda store: store.read_metadata(),
    "get_tensor": lambda store: store.get_tensor("w"),
    "load": lambda store: load_from({"w": np.zeros(2, np.float32)}, store),
    "save-from": lambda store: save_into(store, SafetensorsStore.from_bytes()),
}


def _assert_missing(err: BaseException, path: Path) -> None:
    assert isinstance(err, FileMissingError)
    assert isinstance(err, FileNotFoundError) and isinstance(err, WeightstoreError)
    assert (err.path, err.filename, err.errno) == (str(path), str(path), errno.ENOENT)
    assert err.tensor is None and err.detail == "does not exist"
    assert str(err) == f"{path}: does not exist"


def _assert_directory(err: BaseException, path: Path) -> None:
    assert isinstance(err, PathIsDirectoryError)
    assert isinstance(err, IsADirectoryError) and isinstance(err, WeightstoreError)
    assert (err.path, err.filename, err.errno) == (str(path), str(path), errno.EISDIR)
    assert str(err).startswith(f"{path}: is a directory") and "sharded" in str(err)


@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("case", sorted(MISSING))
def test_a_missing_file_raises_at_the_first_read(case: str, read: str, tmp_path: Path) -> None:
    open_store, given, opened = MISSING[case]
    store = open_store(tmp_path / given)  # no error yet: the path may be a save target
    with pytest.raises(FileMissingError) as caught:
        READS[read](store)
    _assert_missing(caught.value, tmp_path / opened)


def test_a_missing_path_is_still_a_save_target(tmp_path: Path) -> None:
    store = SafetensorsStore.from_file(tmp_path / "new.safetensors")
    save_into({"w": np.ones(2, np.float32)}, store)
    assert store.keys() == ["w"]


@pytest.mark.parametrize(
    "open_store",
    [BurnpackStore.from_file, SafetensorsStore.from_file, PytorchStore.from_file],
    ids=["burnpack", "safetensors", "pytorch"],
)
@pytest.mark.parametrize("name", ["shards", "model.safetensors", "model.bpk"])
def test_an_empty_directory_is_a_set_that_holds_nothing(
    open_store: Any, name: str, tmp_path: Path
) -> None:
    # A directory is a sharded set's path: opening it is no error (a save may write the set
    # there), reading it says what was looked for.
    directory = tmp_path / name
    directory.mkdir()
    store = open_store(directory)
    with pytest.raises(SetError) as caught:
        store.keys()
    assert caught.value.path == str(directory)
    assert "holds no checkpoint set" in caught.value.detail
    assert ".index.json" in caught.value.detail


def test_store_from_file_cannot_tell_an_empty_directory_s_format(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFormatError) as caught:
        Store.from_file(tmp_path)
    assert caught.value.path == str(tmp_path)
    assert "declared store" in caught.value.detail


def test_an_extensionless_burnpack_directory_is_read_as_a_set(tmp_path: Path) -> None:
    directory = tmp_path / "model"
    directory.mkdir()
    store = BurnpackStore.from_file(directory)
    with pytest.raises(SetError):
        store.keys()
    # ... while a save goes beside it, as Burn's extension rule says
    assert save_into({"w": np.ones(2, np.float32)}, store) == str(tmp_path / "model.bpk")


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_open_source_raises_the_typed_errors(mode: Any, tmp_path: Path) -> None:
    with pytest.raises(FileMissingError) as missing:
        open_source(tmp_path / "absent", mode)
    _assert_missing(missing.value, tmp_path / "absent")
    with pytest.raises(PathIsDirectoryError) as directory:
        open_source(tmp_path, mode)
    _assert_directory(directory.value, tmp_path)


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_safetensors_reader_raises_the_typed_errors(mode: Any, tmp_path: Path) -> None:
    with pytest.raises(FileMissingError) as missing:
        SafetensorsReader.from_file(tmp_path / "absent.safetensors", mode=mode)
    _assert_missing(missing.value, tmp_path / "absent.safetensors")
    with pytest.raises(PathIsDirectoryError) as directory:
        SafetensorsReader.from_file(tmp_path, mode=mode)
    _assert_directory(directory.value, tmp_path)


def test_burnpack_reader_raises_the_typed_error_for_a_directory(tmp_path: Path) -> None:
    directory = tmp_path / "model.bpk"
    directory.mkdir()
    with pytest.raises(PathIsDirectoryError) as caught:
        BurnpackReader.from_file(directory)
    _assert_directory(caught.value, directory)


def test_burnpack_reader_raises_the_typed_error_for_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileMissingError):
        BurnpackReader.from_file(tmp_path / "absent.bpk")


@pytest.mark.parametrize("directory", [False, True])
def test_pytorch_reader_raises_the_typed_errors(directory: bool, tmp_path: Path) -> None:
    from weightstore.pytorch_reader import PytorchReader

    path = tmp_path if directory else tmp_path / "absent.pt"
    with pytest.raises(FileMissingError if not directory else PathIsDirectoryError):
        PytorchReader.from_file(path)


def test_detection_raises_the_typed_errors(tmp_path: Path) -> None:
    from weightstore import open_reader
    from weightstore.formats import detect_format

    with pytest.raises(FileMissingError):
        detect_format(tmp_path / "absent.bin")
    with pytest.raises(FileMissingError):
        open_reader(tmp_path / "absent.bin")
    with pytest.raises(UnsupportedFormatError, match="holding no checkpoint set"):
        open_reader(tmp_path)  # a directory: a set, were one there
