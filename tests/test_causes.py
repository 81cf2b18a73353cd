"""Files that hold no weights are named by what they are, through every opener, before any
format's reader can mislead (issue 24): a git-lfs pointer's "version " read as a SafeTensors
header length of 2 EB sent users to raise a safety limit."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import BurnpackStore, SafetensorsStore, Store, open_reader, safetensors
from weightstore.base._cause import MAX_LFS_POINTER_SIZE, cause_of, shown_head
from weightstore.burnpack import BurnpackReader
from weightstore.entry import TensorEntry
from weightstore.errors import LfsPointerError, NotWeightsError, UnsupportedFormatError
from weightstore.formats import detect_format
from weightstore.pytorch_reader import PytorchReader
from weightstore.safetensors import SafetensorsReader
from weightstore.sets import open_set

OID = "sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393"
POINTER = f"version https://git-lfs.github.com/spec/v1\noid {OID}\nsize 123\n".encode()


def _npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(4))
    return buffer.getvalue()


def _npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, a=np.arange(4))
    return buffer.getvalue()


def _keras() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("metadata.json", "{}")
        archive.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n")
    return buffer.getvalue()


# (cause, the file's bytes, a fragment of the message)
CAUSES: list[tuple[str, bytes, str]] = [
    ("lfs-pointer", POINTER, "is a git-lfs pointer (oid sha256:4d7a214614ab..., 123 bytes)"),
    ("empty", b"", "is an empty file (0 bytes)"),
    ("html", b"<!DOCTYPE html>\n<html><body>404 Not Found</body></html>\n", "an HTML page"),
    ("html", b"\n  <html><head><title>Sign in</title></head></html>", "likely a failed download"),
    (
        "xml",
        b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code></Error>',
        "an XML document holding an error",
    ),
    ("json-error", b'{"error":"Repository Not Found"}', 'a JSON error body ("{\\"error\\"'),
    ("text", b"these are my notes\nabout the model\n", 'a text file ("these are my notes about'),
    ("onnx", b"\x08\x07\x12\x07pytorch\x1a\x052.1.0" + bytes(64), "an ONNX model"),
    ("hdf5", b"\x89HDF\r\n\x1a\n" + bytes(64), "an HDF5 file (Keras .h5 or h5py)"),
    ("npy", _npy(), "a NumPy .npy array file"),
    ("npz", _npz(), "a NumPy .npz archive"),
    ("ggml", b"lmgg" + bytes(64), "a legacy GGML file (llama.cpp before GGUF"),
    ("ggml", b"tjgg" + bytes(64), "not GGUF: convert it with"),
    ("tflite", b"\x1c\x00\x00\x00TFL3" + bytes(64), "a TensorFlow Lite model"),
    ("zip", _keras(), "a Keras .keras archive"),
]
IDS = [f"{cause}-{i}" for i, (cause, _, _) in enumerate(CAUSES)]

OPENERS: dict[str, Callable[[Path], Any]] = {
    "open_reader": open_reader,
    "Store.from_file": lambda path: Store.from_file(path).keys(),
    "detect_format": detect_format,
    "SafetensorsStore": lambda path: SafetensorsStore.from_file(path).keys(),
    "BurnpackStore": lambda path: BurnpackStore.from_file(path).keys(),
}


@pytest.mark.parametrize(("cause", "content", "fragment"), CAUSES, ids=IDS)
@pytest.mark.parametrize("opener", sorted(OPENERS))
def test_every_opener_names_what_the_file_is(
    tmp_path: Path, opener: str, cause: str, content: bytes, fragment: str
) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(NotWeightsError) as caught:
        OPENERS[opener](path)
    assert caught.value.cause == cause
    assert caught.value.path == str(path)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(("cause", "content", "fragment"), CAUSES, ids=IDS)
@pytest.mark.parametrize("reader", [SafetensorsReader, BurnpackReader, PytorchReader])
def test_each_formats_reader_names_it_before_its_own_complaint(
    tmp_path: Path, reader: Any, cause: str, content: bytes, fragment: str
) -> None:
    # A text file is left to the PyTorch reader's own message: a protocol 0 pickle is text.
    if reader is PytorchReader and cause in ("text", "json-error"):
        pytest.skip("told apart from a pickle by the pickle's own failure")
    path = tmp_path / "model.bin"
    path.write_bytes(content)
    with pytest.raises(NotWeightsError) as caught:
        reader.from_file(path)
    assert caught.value.cause == cause
    assert fragment in str(caught.value)


def test_a_pointer_is_named_before_the_header_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(POINTER)
    with pytest.raises(LfsPointerError) as caught:
        SafetensorsReader.from_file(path)
    assert (caught.value.oid, caught.value.size) == (OID, 123)
    assert "limit" not in str(caught.value)
    assert str(caught.value).endswith("not the file; run `git lfs pull`")


def test_a_pointer_in_a_one_file_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(POINTER)
    with pytest.raises(LfsPointerError) as caught:
        open_reader(tmp_path)
    assert caught.value.path == str(tmp_path / "model.safetensors")


def _pointer_set(tmp_path: Path, shards: int, pointers: set[int]) -> Path:
    weight_map = {}
    for number in range(1, shards + 1):
        name = f"model-{number:05d}-of-{shards:05d}.safetensors"
        weight_map[f"t{number}"] = name
        path = tmp_path / name
        if number in pointers:
            path.write_bytes(POINTER)
        else:
            entry = TensorEntry.from_array(f"t{number}", np.zeros(2, np.float32))
            safetensors.write_file(path, [entry])
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index


def test_every_pointer_shard_of_a_set_is_named(tmp_path: Path) -> None:
    _pointer_set(tmp_path, 4, {1, 2, 4})
    with open_set(tmp_path) as reader, pytest.raises(LfsPointerError) as caught:
        reader.get("t1")
    assert caught.value.path == str(tmp_path / "model-00001-of-00004.safetensors")
    assert [Path(p).name for p in caught.value.others] == [
        "model-00002-of-00004.safetensors",
        "model-00004-of-00004.safetensors",
    ]
    message = str(caught.value)
    assert "so are model-00002-of-00004.safetensors, model-00004-of-00004.safetensors" in message
    assert "model-00003" not in message


def test_a_set_with_one_pointer_shard_names_only_it(tmp_path: Path) -> None:
    _pointer_set(tmp_path, 3, {2})
    with open_set(tmp_path) as reader:
        np.testing.assert_array_equal(reader.get("t1"), np.zeros(2, np.float32))
        with pytest.raises(LfsPointerError) as caught:
            reader.get("t2")
    assert caught.value.others == ()


def test_a_pointer_just_under_the_spec_size_is_one_and_at_it_is_text() -> None:
    padded = POINTER + b"x" * (MAX_LFS_POINTER_SIZE - 1 - len(POINTER))
    found = cause_of(padded[:512], len(padded))
    assert found is not None and found.key == "lfs-pointer"
    at_limit = cause_of(padded[:512], MAX_LFS_POINTER_SIZE)
    assert at_limit is not None and at_limit.key == "text"


def test_a_pointer_without_its_oid_line_is_still_named() -> None:
    found = cause_of(b"version https://git-lfs.github.com/spec/v1\nsize 9\n", 49)
    assert found is not None and (found.key, found.oid, found.size) == ("lfs-pointer", None, 9)


def test_unknown_bytes_show_their_printable_head_as_text(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"WTF1\x00\x01\x02\x03" + bytes(64))  # binary: no cause
    with pytest.raises(UnsupportedFormatError) as caught:
        open_reader(path)
    assert not isinstance(caught.value, NotWeightsError)
    assert "starts with 57 54 46 31 00 01 02 03" in str(caught.value)
    assert shown_head(b"PAR1abcd") == '50 41 52 31 61 62 63 64 ("PAR1abcd")'
    assert shown_head(b"\x00abc") == "00 61 62 63"


def test_a_json_index_is_still_named_as_one(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_text('{"weight_map": {}}')
    with pytest.raises(UnsupportedFormatError, match="sharded checkpoint's index") as caught:
        open_reader(path)
    assert not isinstance(caught.value, NotWeightsError)


@pytest.mark.parametrize("fmt", ["burnpack", "safetensors", "pytorch"])
def test_real_checkpoints_have_no_cause(tmp_path: Path, fmt: str) -> None:
    from tests.cli._support import FORMAT_SUFFIX, torch_layout_arrays, write_weights

    path = write_weights(fmt, tmp_path / f"m{FORMAT_SUFFIX[fmt]}", torch_layout_arrays())
    data = path.read_bytes()
    assert cause_of(data[:512], len(data)) is None
