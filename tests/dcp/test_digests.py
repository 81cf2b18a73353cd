"""DCP checkpoints with digests (docs/integrity.md): every rank file carries its chunks'
digests, the index lists every chunk's, and a load fails a changed chunk byte."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from weightstore import DigestMismatchError, open_reader  # noqa: E402
from weightstore.dcp import DCP_INDEX_NAME, BurnpackStorageReader, BurnpackStorageWriter  # noqa: E402
from weightstore.errors import InvalidOptionError  # noqa: E402
from weightstore.io._digest import METADATA_KEY  # noqa: E402


@pytest.fixture(autouse=True)
def _one_process() -> Iterator[None]:
    with warnings.catch_warnings():  # DCP: "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        yield


def _state() -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    return {"fc": {"weight": torch.randn(6, 4, generator=generator), "bias": torch.ones(6)}}


def _save(directory: Path) -> dict[str, Any]:
    writer = BurnpackStorageWriter(directory, digests="sha256")
    dcp.save(_state(), storage_writer=writer, no_dist=True)
    index: dict[str, Any] = json.loads((directory / DCP_INDEX_NAME).read_text())
    return index


def test_the_index_lists_every_chunks_digest(tmp_path: Path) -> None:
    index = _save(tmp_path)
    digests = json.loads(index["metadata"][METADATA_KEY])
    assert digests["algorithm"] == "sha256"
    expected = {
        "fc.weight": [hashlib.sha256(_state()["fc"]["weight"].numpy().tobytes()).hexdigest()],
        "fc.bias": [hashlib.sha256(_state()["fc"]["bias"].numpy().tobytes()).hexdigest()],
    }
    assert digests["chunks"] == expected
    (file,) = {c["file"] for t in index["tensors"].values() for c in t["chunks"]}
    with open_reader(tmp_path / file) as rank_file:
        assert rank_file.verify_digests() == []


def test_a_digest_checkpoint_loads(tmp_path: Path) -> None:
    _save(tmp_path)
    target = {"fc": {"weight": torch.zeros(6, 4), "bias": torch.zeros(6)}}
    dcp.load(target, storage_reader=BurnpackStorageReader(tmp_path), no_dist=True)
    assert torch.equal(target["fc"]["weight"], _state()["fc"]["weight"])


def test_a_changed_chunk_byte_fails_the_load(tmp_path: Path) -> None:
    index = _save(tmp_path)
    (file,) = {c["file"] for t in index["tensors"].values() for c in t["chunks"]}
    path = tmp_path / file
    with open_reader(path) as reader:
        offset = reader.data_start + reader.descriptor("fc.bias").data_offsets[0]
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    target = {"fc": {"weight": torch.zeros(6, 4), "bias": torch.zeros(6)}}
    with pytest.raises(dcp.CheckpointException) as caught:  # DCP wraps each rank's error
        dcp.load(target, storage_reader=BurnpackStorageReader(tmp_path), no_dist=True)
    (failure,) = caught.value.failures.values()  # (the exception, its traceback)
    error = failure[0] if isinstance(failure, tuple) else failure
    assert isinstance(error, DigestMismatchError) and error.tensor == "fc.bias"


def test_an_unknown_algorithm_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="md5"):
        BurnpackStorageWriter(tmp_path, digests="md5")


def test_verify_fails_a_changed_chunk_byte(tmp_path: Path) -> None:
    from tests.cli._support import assert_error, run_cli

    index = _save(tmp_path)
    assert run_cli("verify", tmp_path).returncode == 0
    (file,) = {c["file"] for t in index["tensors"].values() for c in t["chunks"]}
    path = tmp_path / file
    with open_reader(path) as reader:
        offset = reader.data_start + reader.descriptor("fc.weight").data_offsets[0]
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    done = run_cli("verify", tmp_path)
    assert_error(done, 2, "verification failed (1 problem)")
    assert "tensor 'fc.weight'" in done.stdout and "sha256 digest mismatch" in done.stdout
