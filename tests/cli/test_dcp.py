"""The commands on a `torch.distributed.checkpoint` directory saved through `weightstore.dcp`:
`inspect` lists whole tensors, values and rank files; `verify` reads every chunk; `diff`
compares it with a file; `convert` joins it into one file."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from tests.cli._support import run_cli

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")
safetensors_torch = pytest.importorskip("safetensors.torch")


@pytest.fixture
def checkpoint(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    from weightstore.dcp import BurnpackStorageWriter

    torch.manual_seed(0)
    tensors = {"w": torch.randn(4, 3), "b": torch.arange(3, dtype=torch.float32)}
    state = {"model": dict(tensors), "step": 7}
    with warnings.catch_warnings():  # one process, no group: DCP says it assumes so
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, storage_writer=BurnpackStorageWriter(tmp_path / "ck"), no_dist=True)
    return tmp_path / "ck", tensors


def test_inspect_lists_the_whole_tensors_values_and_rank_files(
    checkpoint: tuple[Path, dict[str, object]],
) -> None:
    directory, _ = checkpoint
    done = run_cli("inspect", "--json", directory)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["format"] == "dcp"
    assert {row["name"]: row["shape"] for row in report["tensors"]} == {
        "model.w": [4, 3],
        "model.b": [3],
    }
    assert report["others"] == {"step": 7}
    [shard] = report["set"]["shards"]
    assert shard["file"].startswith("rank-00000.") and shard["tensors"] == 2


def test_verify_diff_and_convert_read_the_checkpoint(
    checkpoint: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    directory, tensors = checkpoint
    done = run_cli("verify", directory)
    assert done.returncode == 0, done.stderr
    assert "ok (burnpack, 2 tensors, 60 bytes read)" in done.stdout
    single = tmp_path / "same.safetensors"
    safetensors_torch.save_file({f"model.{k}": v for k, v in tensors.items()}, str(single))
    assert run_cli("diff", directory, single).returncode == 0
    joined = tmp_path / "joined.safetensors"
    assert run_cli("convert", directory, joined).returncode == 0
    loaded = safetensors_torch.load_file(str(joined))
    assert loaded.keys() == {"model.w", "model.b"}
    assert all(torch.equal(loaded[f"model.{k}"], v) for k, v in tensors.items())


def test_inspect_shows_each_tensors_chunk_count_where_files_show_an_offset(
    checkpoint: tuple[Path, dict[str, object]],
) -> None:
    """A DCP tensor has no one offset (it is pieces of rank files): the column that holds a
    file's offsets holds the chunk count, and says so in its header, instead of staying
    empty."""
    directory, _ = checkpoint
    done = run_cli("inspect", directory)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("name "))
    assert header.split()[-1] == "chunks"
    rows = {line.split()[0]: line.split()[-1] for line in lines if line.startswith("model.")}
    assert rows == {"model.w": "1", "model.b": "1"}
    report = json.loads(run_cli("inspect", "--json", directory).stdout)
    assert {row["name"]: row["chunks"] for row in report["tensors"]} == {"model.w": 1, "model.b": 1}
