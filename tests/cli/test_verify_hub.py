"""`verify` of a Hugging Face cache snapshot: each LFS blob's SHA-256 against its name.

The cache is built by hand as huggingface_hub lays it out: ``blobs/<sha256>`` for LFS files,
``blobs/<git sha1>`` for small ones, ``snapshots/<rev>/`` of relative symlinks, ``refs/main``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.cli._support import ERROR_PREFIX, torch_layout_arrays, write_weights
from weightstore.cli import main

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _blob(repo: Path, data: bytes, name: str) -> str:
    (repo / "blobs" / name).write_bytes(data)
    return name


def _hub_snapshot(tmp_path: Path, shards: int = 1) -> Path:
    """``models--org--tiny`` with `shards` LFS weight files and a git-stored config."""
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / REVISION
    for folder in (repo / "blobs", snapshot, repo / "refs"):
        folder.mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    arrays = torch_layout_arrays()
    names = sorted(arrays)
    for shard in range(shards):
        part = {name: arrays[name] for name in names[shard::shards]}
        made = write_weights("safetensors", tmp_path / "made.safetensors", part)
        data = made.read_bytes()
        made.unlink()
        blob = _blob(repo, data, hashlib.sha256(data).hexdigest())
        file = "model.safetensors" if shards == 1 else f"model-{shard + 1:05d}-of-{shards:05d}"
        os.symlink(
            f"../../blobs/{blob}", snapshot / (file + ("" if shards == 1 else ".safetensors"))
        )
    config = b'{"model_type": "tiny"}'
    git_sha1 = hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest()
    os.symlink(f"../../blobs/{_blob(repo, config, git_sha1)}", snapshot / "config.json")
    return snapshot


def _run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, list[str], list[str]]:
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out.splitlines(), err.splitlines()


def _damage(blob: Path) -> None:
    """Change one byte of `blob` in place, keeping its size (a bit flip on disk)."""
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0x01  # the last tensor byte: the file still parses
    blob.write_bytes(bytes(data))


def test_an_intact_snapshot_passes_and_says_what_it_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = _hub_snapshot(tmp_path)
    code, out, err = _run(capsys, "verify", snapshot)
    assert (code, err) == (0, [])
    assert out == [
        f"{snapshot}: ok (safetensors, 11 tensors, 720 bytes read)",
        "  note: Hub cache: the SHA-256 of 1 LFS blob checked against its name: model.safetensors",
        "  note: Hub cache: not checked, named by a git SHA-1: config.json",
    ]


def test_a_damaged_blob_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = _hub_snapshot(tmp_path)
    blob = (snapshot / "model.safetensors").resolve()
    size = blob.stat().st_size
    _damage(blob)
    assert blob.stat().st_size == size
    code, out, err = _run(capsys, "verify", snapshot)
    assert code == 2
    assert out[0] == f"{snapshot}: FAILED (safetensors, 11 tensors, 720 bytes read)"
    damaged = [line for line in out if "the blob is damaged" in line]
    assert damaged == [
        f"  model.safetensors: blob {blob.name} has SHA-256 "
        f"{hashlib.sha256(blob.read_bytes()).hexdigest()}, not its name; the blob is damaged"
    ]
    assert err == [f"{ERROR_PREFIX}{snapshot}: verification failed (1 problem)"]


def test_a_damaged_shard_of_a_set_is_named_and_the_other_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = _hub_snapshot(tmp_path, shards=2)
    second = snapshot / "model-00002-of-00002.safetensors"
    _damage(second.resolve())
    code, out, err = _run(capsys, "verify", snapshot)
    assert code == 2
    damaged = [line for line in out if "the blob is damaged" in line]
    assert len(damaged) == 1 and damaged[0].startswith(f"  {second.name}: blob ")
    assert "LFS blobs checked against its name: model-00001-of-00002.safetensors, " in out[-2]
    assert len([line for line in err if line.startswith(ERROR_PREFIX)]) == 1


def test_a_file_of_a_snapshot_has_its_own_blob_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = _hub_snapshot(tmp_path)
    _damage((snapshot / "model.safetensors").resolve())
    code, out, _ = _run(capsys, "verify", snapshot / "model.safetensors")
    assert code == 2 and any("the blob is damaged" in line for line in out)


def test_a_directory_outside_a_cache_gets_no_blob_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``snapshots/<rev>`` without a ``<kind>--`` repository above it is no Hub cache."""
    folder = tmp_path / "plain" / "snapshots" / "rev"
    folder.mkdir(parents=True)
    (tmp_path / "plain" / "blobs").mkdir()
    write_weights("safetensors", folder / "model.safetensors", torch_layout_arrays())
    code, out, _ = _run(capsys, "verify", folder)
    assert code == 0 and not any("Hub cache" in line for line in out)


def test_a_set_index_of_a_snapshot_has_its_shards_blobs_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = _hub_snapshot(tmp_path, shards=2)
    index = snapshot / "model.safetensors.index.json"
    names = sorted(torch_layout_arrays())
    weight_map = {
        name: f"model-{position % 2 + 1:05d}-of-00002.safetensors"
        for position, name in enumerate(names)
    }
    data = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    git_sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    os.symlink(f"../../blobs/{_blob(snapshot.parents[1], data, git_sha1)}", index)
    _damage((snapshot / "model-00001-of-00002.safetensors").resolve())
    code, out, _ = _run(capsys, "verify", index)
    assert code == 2
    damaged = [line for line in out if "the blob is damaged" in line]
    assert len(damaged) == 1 and damaged[0].startswith("  model-00001-of-00002.safetensors: ")
