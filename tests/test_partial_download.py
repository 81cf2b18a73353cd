"""A file shorter than its header says is named as truncated with the bytes missing, in every
format and in a set's shards, and an unfinished download lying beside it is named (issue 24):
a torch zip cut short said only "damaged zip archive: File is not a zip file"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.cli._support import ERROR_PREFIX, FORMAT_SUFFIX, write_weights
from weightstore import open_reader
from weightstore.cli import main
from weightstore.errors import TruncatedError, unfinished_download

ARRAYS = {"w": np.arange(4000, dtype=np.float32), "b": np.ones(10, np.float32)}


def _cut(tmp_path: Path, fmt: str, name: str | None = None) -> tuple[Path, int]:
    """A file of `fmt` cut to half its size; the path and the full size."""
    path = tmp_path / (name or f"model{FORMAT_SUFFIX[fmt]}")
    write_weights(fmt, path, ARRAYS)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path, len(data)


def _truncation(path: Path) -> TruncatedError:
    with pytest.raises(TruncatedError) as caught, open_reader(path) as reader:
        for name in reader.names():
            reader.get(name)
    return caught.value


@pytest.mark.parametrize("fmt", ["burnpack", "safetensors", "pytorch"])
def test_a_cut_file_says_how_many_bytes_are_missing(tmp_path: Path, fmt: str) -> None:
    path, full = _cut(tmp_path, fmt)
    error = _truncation(path)
    missing = error.expected - error.found
    assert missing > 0 and error.found <= path.stat().st_size
    assert error.expected <= full  # a bound, never more than the file really needs
    bound = "at least " if error.at_least else ""
    assert f"({bound}{missing:,} missing); the file is truncated" in str(error)
    assert error.incomplete is None


def test_a_cut_torch_zip_is_named_truncated_not_a_damaged_archive(tmp_path: Path) -> None:
    path, _ = _cut(tmp_path, "pytorch")
    error = _truncation(path)
    assert error.at_least
    assert "cut inside entry" in str(error) and "not a zip file" not in str(error)


@pytest.mark.parametrize("fmt", ["burnpack", "safetensors", "pytorch"])
def test_an_unfinished_download_beside_it_is_named(tmp_path: Path, fmt: str) -> None:
    path, _ = _cut(tmp_path, fmt)
    partial = Path(f"{path}.incomplete")
    partial.write_bytes(b"more")
    error = _truncation(path)
    assert error.incomplete == str(partial)
    assert f"; {partial.name} beside it is an unfinished download" in str(error)


def test_a_cache_snapshots_unfinished_blob_is_named(tmp_path: Path) -> None:
    blobs = tmp_path / "models--org--m" / "blobs"
    snapshot = tmp_path / "models--org--m" / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    blob, _ = _cut(blobs, "safetensors", "0f1e2d")
    (snapshot / "model.safetensors").symlink_to(os.path.relpath(blob, snapshot))
    (blobs / "0f1e2d.incomplete").write_bytes(b"x")
    error = _truncation(snapshot / "model.safetensors")
    assert error.incomplete == str(blobs / "0f1e2d.incomplete")


def test_a_local_dir_downloads_unfinished_file_is_named(tmp_path: Path) -> None:
    path, _ = _cut(tmp_path, "safetensors")
    downloads = tmp_path / ".cache" / "huggingface" / "download"
    downloads.mkdir(parents=True)
    (downloads / "model.safetensors.a1b2c3.incomplete").write_bytes(b"x")
    (downloads / "other.safetensors.a1b2c3.incomplete").write_bytes(b"x")
    assert unfinished_download(str(path)) == str(downloads / "model.safetensors.a1b2c3.incomplete")


def test_no_sibling_is_looked_for_a_url_or_memory() -> None:
    assert unfinished_download("https://example.invalid/m.safetensors") is None
    assert unfinished_download(None) is None


def _set_with_a_cut_shard(tmp_path: Path, fmt: str) -> Path:
    suffix = FORMAT_SUFFIX[fmt] if fmt != "pytorch" else ".bin"
    stem = "model" if fmt != "pytorch" else "pytorch_model"
    first = tmp_path / f"{stem}-00001-of-00002{suffix}"
    write_weights(fmt, first, {"a": np.zeros(3, np.float32)})
    second, _ = _cut(tmp_path, fmt, f"{stem}-00002-of-00002{suffix}")
    weight_map = {"a": first.name, "w": second.name, "b": second.name}
    index = tmp_path / f"{stem}{suffix}.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return second


@pytest.mark.parametrize("fmt", ["safetensors", "pytorch"])
def test_a_cut_shard_of_a_set_says_how_many_bytes_are_missing(tmp_path: Path, fmt: str) -> None:
    shard = _set_with_a_cut_shard(tmp_path, fmt)
    error = _truncation(tmp_path)
    assert error.path == str(shard)
    assert "missing); the file is truncated" in str(error)


@pytest.mark.parametrize("fmt", ["burnpack", "safetensors", "pytorch"])
@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_the_cli_names_the_missing_bytes_and_the_download(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, command: str
) -> None:
    path, _ = _cut(tmp_path, fmt)
    Path(f"{path}.incomplete").write_bytes(b"x")
    code = main([command, str(path)])
    out, err = capsys.readouterr()
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(errors) == 1, err
    said = errors[0] if command == "inspect" else out
    assert "missing); the file is truncated" in said
    assert f"{path.name}.incomplete beside it is an unfinished download" in said
