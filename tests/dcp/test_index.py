"""The DCP index: its exact text, and every rule a hostile one breaks, each refused with a
`SetError` naming the index and the tensor at fault, before any rank file is opened."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from weightstore.dcp._index import (
    DCP_INDEX_NAME,
    MAX_DCP_INDEX_DEPTH,
    MAX_DIM_SIZE,
    MAX_DIMS,
    DcpChunk,
    DcpTensor,
    dcp_index_bytes,
    is_dcp_checkpoint,
    locate_rank_files,
    parse_dcp_index,
    rank_file_name,
    read_dcp_index,
)
from weightstore.dtypes import from_name
from weightstore.errors import LimitExceeded, SetError

SET_ID = "0123456789abcdef0123456789abcdef"
FILE0, FILE1 = rank_file_name(0, SET_ID, "bpk"), rank_file_name(1, SET_ID, "bpk")

GOLDEN = """{
  "metadata": {
    "run": "a",
    "weightstore.format": "torch.distributed.checkpoint",
    "weightstore.container": "burnpack",
    "weightstore.set_id": "0123456789abcdef0123456789abcdef",
    "total_size": 32,
    "dcp_version": "1.0.0"
  },
  "tensors": {
    "w": {"dtype": "F32", "shape": [2, 4], "chunks": [\
{"file": "rank-00000.01234567.bpk", "name": "w", "offsets": [0, 0], "sizes": [1, 4]}, \
{"file": "rank-00001.01234567.bpk", "name": "w", "offsets": [1, 0], "sizes": [1, 4]}]}
  },
  "values": {
    "lr": 0.5,
    "betas": {"$tuple": [0.9, 0.99]}
  },
  "paths": {
    "w": ["model", "w"],
    "lr": ["lr"],
    "betas": ["betas"]
  }
}
"""


def two_chunks() -> dict[str, DcpTensor]:
    chunks = [DcpChunk(FILE0, "w", [0, 0], [1, 4]), DcpChunk(FILE1, "w", [1, 0], [1, 4])]
    return {"w": DcpTensor(from_name("F32"), (2, 4), chunks)}


def golden_bytes() -> bytes:
    return dcp_index_bytes(
        SET_ID,
        two_chunks(),
        {"lr": 0.5, "betas": (0.9, 0.99)},
        paths={"w": ("model", "w"), "lr": ("lr",), "betas": ("betas",)},
        planner_data=None,
        metadata={"run": "a", "weightstore.set_id": "ffff"},  # a reserved key is replaced
        container="burnpack",
        dcp_version="1.0.0",
    )


def test_the_index_text_is_exact() -> None:
    assert golden_bytes().decode() == GOLDEN


def test_the_index_reads_back() -> None:
    index = parse_dcp_index(golden_bytes(), "ckpt/dcp.index.json")
    assert index.set_id == SET_ID and index.tensors == two_chunks()
    assert index.values == {"lr": 0.5, "betas": (0.9, 0.99)}
    assert index.paths == {"w": ("model", "w"), "lr": ("lr",), "betas": ("betas",)}
    assert index.metadata["run"] == "a" and index.metadata["total_size"] == "32"
    assert index.files() == [FILE0, FILE1] and index.directory == "ckpt"


def broken(change: Any) -> bytes:
    """The golden index with `change(index)` applied to its JSON."""
    index = json.loads(GOLDEN)
    change(index)
    return json.dumps(index).encode()


def chunk(index: dict[str, Any], number: int) -> dict[str, Any]:
    found: dict[str, Any] = index["tensors"]["w"]["chunks"][number]
    return found


CASES: list[tuple[str, Any, str]] = [
    ("not-an-object", lambda i: i.clear() or i.update(x=1), '"weightstore.format"'),
    ("format", lambda i: i["metadata"].pop("weightstore.format"), "no weightstore"),
    ("set-id", lambda i: i["metadata"].update({"weightstore.set_id": "XYZ"}), "32 lowercase"),
    ("dtype", lambda i: i["tensors"]["w"].update(dtype="F99"), "dtype 'F99'"),
    ("no-numpy-dtype", lambda i: i["tensors"]["w"].update(dtype="QFLOAT"), "dtype 'QFLOAT'"),
    ("shape", lambda i: i["tensors"]["w"].update(shape=[2, -4]), "non-negative"),
    ("huge-dim", lambda i: i["tensors"]["w"].update(shape=[2, 2**63]), "below 2**63"),
    ("huge-offset", lambda i: chunk(i, 1).update(offsets=[10**4000, 0]), "below 2**63"),
    ("bool-dim", lambda i: i["tensors"]["w"].update(shape=[True, 4]), "non-negative"),
    ("dims", lambda i: i["tensors"]["w"].update(shape=[1] * 65), "at most 64"),
    ("chunks", lambda i: i["tensors"]["w"].update(chunks={}), '"chunks"'),
    ("chunk-rank", lambda i: chunk(i, 0).update(offsets=[0]), "1 offsets"),
    ("escape", lambda i: chunk(i, 0).update(file="../secret.bpk"), "leaves the directory"),
    ("absolute", lambda i: chunk(i, 0).update(file="/etc/passwd"), "absolute path"),
    ("surrogate", lambda i: chunk(i, 0).update(file="rank-\ud800.bpk"), "lone surrogate"),
    ("past-shape", lambda i: chunk(i, 1).update(offsets=[1, 1]), "reaches past"),
    ("overlap", lambda i: chunk(i, 1).update(offsets=[0, 0]), "overlap: element [0, 0] is in 2"),
    ("gap", lambda i: i["tensors"]["w"]["chunks"].pop(), "gap: element [1, 0] is in none"),
    ("same-name", lambda i: chunk(i, 1).update(file=FILE0, offsets=[1, 0]), "two chunks"),
    ("value-form", lambda i: i["values"].update(lr={"$eval": "1"}), "not one of"),
    ("both", lambda i: i["values"].update(w=1), "both as a tensor and as a value"),
    ("paths", lambda i: i["paths"].update(w=["model", 1.5]), "strings and integers"),
]


@pytest.mark.parametrize(("change", "why"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_broken_index_is_refused(change: Any, why: str) -> None:
    with pytest.raises(SetError) as caught:
        parse_dcp_index(broken(change), "ckpt/dcp.index.json")
    assert why in str(caught.value)
    assert caught.value.path == "ckpt/dcp.index.json"


def test_refusals_name_the_tensor() -> None:
    with pytest.raises(SetError) as caught:
        parse_dcp_index(broken(lambda i: chunk(i, 1).update(offsets=[0, 0])), "i.json")
    assert caught.value.tensor == "w"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"\xff{}", "not UTF-8"),
        (b'{"metadata": {}, "metadata": {}}', "twice"),
        (b'{"values": {"x": NaN}}', "not valid JSON"),
        (b"[" * 300 + b"]" * 300, "nests 300 levels"),
        (b"{" * 5, "not valid JSON"),
    ],
    ids=["utf8", "duplicate", "nan", "deep", "truncated"],
)
def test_bad_json_is_refused(text: bytes, why: str) -> None:
    with pytest.raises(SetError, match=why):
        parse_dcp_index(text, "i.json")
    assert MAX_DCP_INDEX_DEPTH < 300


def test_a_large_index_is_refused_before_it_is_read(tmp_path: Path) -> None:
    (tmp_path / DCP_INDEX_NAME).write_bytes(b" " * 2000)
    with pytest.raises(LimitExceeded):
        read_dcp_index(tmp_path, max_index_size=1000)


def _checkpoint(tmp_path: Path, sizes: tuple[int, int] = (16, 16)) -> Path:
    (tmp_path / DCP_INDEX_NAME).write_bytes(golden_bytes())
    for name, size in zip((FILE0, FILE1), sizes, strict=True):
        (tmp_path / name).write_bytes(bytes(size))
    return tmp_path


def test_rank_files_are_located_and_sized(tmp_path: Path) -> None:
    located = locate_rank_files(read_dcp_index(_checkpoint(tmp_path)))
    assert located == {name: str(tmp_path / name) for name in (FILE0, FILE1)}
    assert is_dcp_checkpoint(tmp_path) and is_dcp_checkpoint(tmp_path / DCP_INDEX_NAME)
    assert not is_dcp_checkpoint(tmp_path / FILE0)


def test_a_rank_file_too_small_for_its_chunks_is_refused(tmp_path: Path) -> None:
    index = read_dcp_index(_checkpoint(tmp_path, (16, 15)))
    with pytest.raises(SetError, match="15 bytes, smaller than the 16") as caught:
        locate_rank_files(index)
    assert caught.value.shard == FILE1


def test_a_missing_rank_file_is_refused(tmp_path: Path) -> None:
    os.unlink(_checkpoint(tmp_path) / FILE1)
    with pytest.raises(SetError, match="does not exist") as caught:
        locate_rank_files(read_dcp_index(tmp_path))
    assert caught.value.shard == FILE1


def test_a_rank_file_linking_outside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    directory = _checkpoint(tmp_path / "ckpt")
    outside = tmp_path / "outside.bpk"
    outside.write_bytes(bytes(16))
    os.unlink(directory / FILE0)
    os.symlink(outside, directory / FILE0)
    with pytest.raises(SetError, match="outside"):
        locate_rank_files(read_dcp_index(directory))


# -- shapes NumPy cannot hold, and numbers too wide to print --------------------------------------


def index_of(tensors: dict[str, Any], values: dict[str, Any] | None = None) -> bytes:
    """An index of `tensors` and `values` (their JSON), with the golden index's metadata."""
    top = json.loads(GOLDEN)
    top.update(tensors=tensors, values=values or {}, paths={})
    return json.dumps(top).encode()


def empty_tensor(shape: list[int], dtype: str = "F32") -> bytes:
    return index_of({"w": {"dtype": dtype, "shape": shape, "chunks": []}})


@pytest.mark.parametrize(
    "shape",
    [[0, 2**64], [2**62, 2**62, 0], [10**1000] * 5, [0, 2**61], [0] + [2**62] * 63, [1] * 65],
    ids=["u64", "product", "digits", "bytes", "wide-product", "dims"],
)
def test_a_shape_numpy_cannot_hold_is_refused_even_when_empty(shape: list[int]) -> None:
    with pytest.raises((SetError, LimitExceeded)) as caught:
        parse_dcp_index(empty_tensor(shape), "i.json")
    assert caught.value.tensor == "w" and caught.value.path == "i.json"
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [([0, MAX_DIM_SIZE], "U8"), ([0, MAX_DIM_SIZE // 4], "F32"), ([0] + [1] * 63, "F64")],
    ids=["dim-limit", "bytes-limit", "dims-limit"],
)
def test_an_empty_tensor_at_the_limits_opens_and_reads(
    shape: list[int], dtype: str, tmp_path: Path
) -> None:
    from weightstore.dcp._reader import open_dcp

    assert len(shape) == MAX_DIMS or max(shape) in (MAX_DIM_SIZE, MAX_DIM_SIZE // 4)
    (tmp_path / DCP_INDEX_NAME).write_bytes(empty_tensor(shape, dtype))
    with open_dcp(str(tmp_path)) as reader:
        assert reader.get("w").shape == tuple(shape)
        assert reader.get_slice("w")[0:0].shape == (0, *shape[1:])
    with pytest.raises(LimitExceeded):  # one more byte than NumPy holds
        parse_dcp_index(empty_tensor([0, MAX_DIM_SIZE // 4 + 1]), "i.json")
    with pytest.raises(SetError, match="below 2"):
        parse_dcp_index(empty_tensor([0, MAX_DIM_SIZE + 1], "U8"), "i.json")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")
@pytest.mark.parametrize("kind", ["a FIFO", "a symlink loop"])
def test_a_rank_file_that_is_a_special_file_is_refused(tmp_path: Path, kind: str) -> None:
    os.unlink(_checkpoint(tmp_path) / FILE1)
    if kind == "a FIFO":
        os.mkfifo(tmp_path / FILE1)
    else:
        os.symlink(FILE1, tmp_path / FILE1)
    with pytest.raises(SetError, match=f"is {kind}, not a file") as caught:
        locate_rank_files(read_dcp_index(tmp_path))
    assert caught.value.shard == FILE1
