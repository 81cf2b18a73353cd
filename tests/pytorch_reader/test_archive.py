"""Layouts (`_archive.py`, `_legacy.py`): zip variants, legacy, tar; what is refused, by name;
and damaged files, which fail with our errors and never with zeros."""

from __future__ import annotations

import contextlib
import gzip
import pickle
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    assert_same,
    exercise,
    op_dict,
    op_int,
    op_list,
    op_storage,
    op_str,
    op_tensor,
    op_tuple,
    pickle_of,
    rewrite_zip,
    torch_style_tar,
    write_tar,
    write_zip,
)
from weightstore.errors import (
    ArchiveError,
    DescriptorError,
    MissingStorageError,
    TruncatedError,
    UnsupportedFormatError,
    WeightstoreError,
)
from weightstore.pytorch_reader import PytorchReader, iter_ops

torch = pytest.importorskip("torch")


def save(obj: Any, path: Path, legacy: bool = False, protocol: int = 2) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(obj, path, _use_new_zipfile_serialization=not legacy, pickle_protocol=protocol)
    return path


def torch_load(path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, weights_only=False)


def sample() -> dict[str, Any]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {"w": base, "t": base.t(), "b": torch.arange(5, dtype=torch.int64), "cfg": {"n": 3}}


# -- zip ----------------------------------------------------------------------------------------


def test_zip_metadata(tmp_path: Path) -> None:
    with PytorchReader(save(sample(), tmp_path / "m.pt")) as reader:
        meta = reader.metadata()
    assert (meta.format, meta.byte_order, meta.format_version, meta.archive_version) == (
        "zip",
        "little",
        "1",
        "3",
    )
    assert (meta.storage_alignment, meta.pickle_protocol, meta.pytorch_version) == (64, 2, None)
    assert (meta.tensor_count, meta.total_bytes) == (3, 24 * 4 * 2 + 5 * 8)
    assert dict(meta)["format"] == "zip"


@pytest.mark.parametrize(
    ("compression", "zip64"),
    [(zipfile.ZIP_STORED, True), (zipfile.ZIP_DEFLATED, False), (zipfile.ZIP_DEFLATED, True)],
)
def test_rewritten_zips_read_the_same(tmp_path: Path, compression: int, zip64: bool) -> None:
    path = save(sample(), tmp_path / "m.pt")
    copy = rewrite_zip(path, tmp_path / "copy.pt", compression=compression, force_zip64=zip64)
    with PytorchReader(copy) as reader:
        for name, tensor in _tensors(path):
            assert_same(reader.get(name), tensor, name)


def _tensors(path: Path) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in torch_load(path).items() if isinstance(v, torch.Tensor)]


def test_a_zip_without_byteorder_is_little_endian(tmp_path: Path) -> None:
    path = save(sample(), tmp_path / "m.pt")
    old = rewrite_zip(
        path, tmp_path / "old.pt", transform=lambda n, d: None if n.endswith("/byteorder") else d
    )
    with PytorchReader(old) as reader:
        assert reader.metadata().byte_order == "little"
        assert reader.get("w")[1, 2] == 8


def test_an_unknown_byteorder_is_refused(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "x.pt", pickle_of(b"N"), {}, byteorder="middle")
    with pytest.raises(ArchiveError) as caught:
        PytorchReader(path)
    assert caught.value.entry == "archive/byteorder"


def test_torch_package_archives_are_refused(tmp_path: Path) -> None:
    path = write_zip(
        tmp_path / "p.pt", pickle_of(b"N"), {}, extra={".data/extern_modules": b"os\n"}
    )
    with pytest.raises(UnsupportedFormatError, match=r"torch\.package"):
        PytorchReader(path)


def test_a_zip_without_data_pkl_is_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(UnsupportedFormatError, match=r"without data\.pkl"):
        PytorchReader(path)


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b"", "an empty file"),
        (gzip.compress(b"data"), "gzip"),
        (b"7z\xbc\xaf\x27\x1c" + bytes(30), "7z archive"),
        (b"\x93NUMPY\x01\x00" + bytes(30), "NumPy .npy"),
        (b"PK\x05\x06" + bytes(18), "empty zip"),
        (b"import os\nos.system('x')\n", "not a zip, tar or pickle"),
        (bytes(range(256)) * 4, "not a zip, tar or pickle"),
    ],
)
def test_other_files_are_refused_by_name(tmp_path: Path, content: bytes, what: str) -> None:
    path = tmp_path / "f.pt"
    path.write_bytes(content)
    with pytest.raises(UnsupportedFormatError, match=what):
        PytorchReader(path)


def _safetensors_shaped(header_size: int) -> bytes:
    """A SafeTensors-shaped file: its u64 header length, a JSON header of that size, 8 bytes."""
    header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    return struct.pack("<Q", header_size) + header.ljust(header_size) + bytes(8)


@pytest.mark.parametrize(
    "content",
    [
        b"NRUB\x01\x00" + struct.pack("<I", 40) + bytes(300),  # burnpack: NONE, then REDUCE
        _safetensors_shaped(56),
        _safetensors_shaped(0x80),  # starts 80 00: PROTO 0
        _safetensors_shaped(0x280),  # starts 80 02: PROTO 2, as a protocol 2 pickle does
        _safetensors_shaped(0x280 | 0x28 << 16),  # 80 02 28: PROTO 2, MARK, then no opcode
        _safetensors_shaped(0x2E4E),  # starts 4e 2e: NONE, STOP, a whole pickle, bytes after it
        _safetensors_shaped(0x10049),  # starts 49: INT, whose line runs past the line limit
    ],
    ids=["burnpack", "json", "proto 0", "proto 2", "proto 2 mark", "pickle then more", "int"],
)
def test_weightstores_own_formats_are_refused_by_their_first_bytes(
    tmp_path: Path, content: bytes
) -> None:
    # This reader names no other weightstore format (the format registry does); it refuses them
    # as it refuses any bytes that are no checkpoint, whatever their first pickle opcode would do.
    path = tmp_path / "other.pt"
    path.write_bytes(content)
    with pytest.raises(UnsupportedFormatError) as caught:
        PytorchReader(path)
    assert "not a PyTorch checkpoint" in str(caught.value)
    assert f"it starts with {content[:8].hex(' ')}" in str(caught.value)


# -- damaged zips: missing storages, lying sizes, views past the end ---------------------------


def test_a_missing_storage_fails_at_first_touch_naming_the_tensor(tmp_path: Path) -> None:
    path = save({"a": torch.ones(3), "b": torch.zeros(2)}, tmp_path / "m.pt")
    hole = rewrite_zip(
        path, tmp_path / "hole.pt", transform=lambda n, d: None if n.endswith("/data/0") else d
    )
    with PytorchReader(hole) as reader:
        assert reader.names() == ["a", "b"]
        with pytest.raises(MissingStorageError) as caught:
            reader.get("a")
        assert (caught.value.key, caught.value.tensor, caught.value.path) == ("0", "a", str(hole))
        assert reader.get("b").tolist() == [0, 0]


def test_a_storage_shorter_than_claimed_is_refused(tmp_path: Path) -> None:
    path = save({"a": torch.ones(3)}, tmp_path / "m.pt")
    short = rewrite_zip(
        path, tmp_path / "short.pt", transform=lambda n, d: d[:8] if n.endswith("/data/0") else d
    )
    with PytorchReader(short) as reader, pytest.raises(DescriptorError, match="holds 8 bytes"):
        reader.get("a")


@pytest.mark.parametrize(
    ("offset", "size", "stride", "fragment"),
    [
        (0, (10,), (1,), "reaches element 9 of a storage holding 4"),
        (3, (2,), (1,), "reaches element 4"),
        (0, (2, 2), (1, 3), "reaches element 4"),
        (0, (2,), (-1,), "negative"),
        (0, (2, 2), (1,), "2 dimensions but stride"),
    ],
)
def test_a_view_outside_its_storage_is_refused(
    tmp_path: Path, offset: int, size: tuple[int, ...], stride: tuple[int, ...], fragment: str
) -> None:
    body = op_dict([(op_str("t"), op_tensor(op_storage("0", 4), offset, size, stride))])
    path = write_zip(tmp_path / "v.pt", pickle_of(body), {"0": np.ones(4, "<f4").tobytes()})
    with PytorchReader(path) as reader:
        with pytest.raises(DescriptorError, match=fragment) as caught:
            reader.get("t")
        assert caught.value.tensor == "t"


def test_an_empty_view_needs_no_storage_bytes(tmp_path: Path) -> None:
    body = op_dict([(op_str("t"), op_tensor(op_storage("0", 0), 7, (0, 3), (3, 1)))])
    path = write_zip(tmp_path / "e.pt", pickle_of(body), {"0": b""})
    with PytorchReader(path) as reader:
        assert reader.get("t").shape == (0, 3)


# -- legacy -------------------------------------------------------------------------------------


def test_legacy_metadata_and_values(tmp_path: Path) -> None:
    path = save(sample(), tmp_path / "l.pt", legacy=True)
    with PytorchReader(path) as reader:
        meta = reader.metadata()
        assert (meta.format, meta.format_version, meta.byte_order) == ("legacy", "1001", "little")
        assert meta.sys_info is not None and meta.sys_info["little_endian"] is True
        for name, tensor in _tensors(path):
            assert_same(reader.get(name), tensor, name)
        assert reader.load_object()["cfg"] == {"n": 3}


def _end_of_pickle(data: bytes, pos: int) -> int:
    *_, (_, _, stop) = iter_ops(data, pos)
    return stop + 1


def _storage_counts(data: bytes) -> list[int]:
    """Offsets of the u64 counts in a legacy file of float32 / int64 storages (`sample()`)."""
    pos = 0
    for _ in range(4):  # magic, protocol version, sys_info, the object
        pos = _end_of_pickle(data, pos)
    end = _end_of_pickle(data, pos)
    keys, pos = pickle.loads(data[pos:end]), end
    offsets = []
    for _ in keys:
        offsets.append(pos)
        (count,) = struct.unpack("<q", data[pos : pos + 8])
        pos += 8 + count * (4 if count == 24 else 8)
    return offsets


@pytest.mark.parametrize("big_endian_counts", [False, True])
def test_legacy_files_from_big_endian_writers(tmp_path: Path, big_endian_counts: bool) -> None:
    # torch wrote storage bytes little-endian on every machine; only sys_info (and, in old
    # versions, the counts) reveal a big-endian writer.
    path = save(sample(), tmp_path / "l.pt", legacy=True)
    data = bytearray(path.read_bytes())
    flag = data.index(b"little_endianq\x02\x88") + len(b"little_endianq\x02")
    data[flag] = 0x89  # NEWTRUE -> NEWFALSE
    if big_endian_counts:
        for pos in _storage_counts(bytes(data)):
            data[pos : pos + 8] = data[pos : pos + 8][::-1]
    big = tmp_path / "big.pt"
    big.write_bytes(bytes(data))
    with PytorchReader(big) as reader:
        assert reader.metadata().sys_info["little_endian"] is False  # type: ignore[index]
        for name, tensor in _tensors(path):
            assert_same(reader.get(name), tensor, name)


def test_a_legacy_count_that_disagrees_is_refused(tmp_path: Path) -> None:
    path = save({"a": torch.ones(3)}, tmp_path / "l.pt", legacy=True)
    data = bytearray(path.read_bytes())
    pos = len(data) - 12 - 8
    assert struct.unpack("<q", data[pos : pos + 8]) == (3,)
    data[pos : pos + 8] = struct.pack("<q", 2)
    path.write_bytes(bytes(data))
    with PytorchReader(path) as reader, pytest.raises(DescriptorError, match="count of 2"):
        reader.get("a")


def test_a_truncated_legacy_storage_fails_at_first_touch(tmp_path: Path) -> None:
    path = save({"a": torch.ones(3), "b": torch.ones(100)}, tmp_path / "l.pt", legacy=True)
    path.write_bytes(path.read_bytes()[:-40])
    with PytorchReader(path) as reader:
        assert reader.names() == ["a", "b"]
        with pytest.raises(TruncatedError) as caught:
            reader.get("b")
        assert caught.value.tensor == "b"


# -- tar ----------------------------------------------------------------------------------------


def test_a_torch_style_tar_reads_as_torch_reads_it(tmp_path: Path) -> None:
    values = np.arange(20, dtype="<f4")
    path = torch_style_tar(
        tmp_path / "old.tar",
        storages=[(1, "FloatStorage", values), (2, "LongStorage", np.arange(3, dtype="<i8"))],
        tensors=[
            (10, 1, "torch.FloatTensor", (4, 5), (5, 1), 0),
            (11, 1, "torch.FloatTensor", (5, 4), (1, 5), 0),  # the transpose, same storage
            (12, 1, "torch.FloatTensor", (3,), (2,), 4),
            (13, 2, "torch.LongTensor", (3,), (1,), 0),
            (14, 30, "torch.FloatTensor", (2,), (1,), 1),  # on a storage view
        ],
        root=op_dict(
            [
                (op_str("w"), op_str("10") + b"Q"),
                (op_str("wt"), op_str("11") + b"Q"),
                (op_str("every_other"), op_str("12") + b"Q"),
                (op_str("nested"), op_list(op_str("13") + b"Q", op_str("14") + b"Q")),
            ]
        ),
        views=op_list(op_tuple(op_int(30), op_int(1), op_int(6), op_int(4))),
    )
    reference = torch_load(path)
    with PytorchReader(path) as reader:
        assert reader.metadata().format == "tar"
        assert reader.names() == ["w", "wt", "every_other", "nested.0", "nested.1"]
        expected = {
            "w": reference["w"],
            "wt": reference["wt"],
            "every_other": reference["every_other"],
            "nested.0": reference["nested"][0],
            "nested.1": reference["nested"][1],
        }
        for name, tensor in expected.items():
            assert_same(reader.get(name), tensor, name)
    assert reference["nested"][1].tolist() == [7.0, 8.0]


def test_a_tar_tensor_on_a_missing_storage_is_named(tmp_path: Path) -> None:
    path = torch_style_tar(
        tmp_path / "hole.tar",
        storages=[(1, "FloatStorage", np.ones(2, "<f4"))],
        tensors=[(10, 99, "torch.FloatTensor", (2,), (1,), 0)],
        root=op_dict([(op_str("x"), op_str("10") + b"Q")]),
    )
    with PytorchReader(path) as reader, pytest.raises(MissingStorageError) as caught:
        reader.get("x")
    assert (caught.value.key, caught.value.tensor) == ("99", "x")


def test_a_tar_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "x.tar", {"readme": b"hi"})
    with pytest.raises(UnsupportedFormatError, match="'pickle' entry"):
        PytorchReader(path)


# -- truncation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["zip", "legacy", "tar"])
def test_every_truncation_raises_our_errors(tmp_path: Path, layout: str) -> None:
    if layout == "tar":
        source = torch_style_tar(
            tmp_path / "t.tar",
            storages=[(1, "FloatStorage", np.ones(8, "<f4"))],
            tensors=[(2, 1, "torch.FloatTensor", (8,), (1,), 0)],
            root=op_dict([(op_str("x"), op_str("2") + b"Q")]),
        )
    else:
        source = save(sample(), tmp_path / "s.pt", legacy=layout == "legacy")
    data = source.read_bytes()
    cut = tmp_path / "cut.pt"
    for size in sorted({*range(0, len(data), max(1, len(data) // 60)), len(data) - 1}):
        cut.write_bytes(data[:size])
        with contextlib.suppress(WeightstoreError):
            exercise(cut)
