"""The commands on sharded sets: `inspect`, `verify`, `diff` and `convert` take a set's
directory or index wherever they take a file, and report what the set leaves out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli._support import assert_error, run_cli

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _arrays(seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return {f"layers.{i}.weight": rng.standard_normal((8, 4)).astype(np.float32) for i in range(4)}


def _hf_set(directory: Path, arrays: dict[str, np.ndarray[Any, Any]], per_shard: int = 2) -> Path:
    """A SafeTensors set in the Hugging Face layout, `per_shard` tensors a shard."""
    directory.mkdir(parents=True, exist_ok=True)
    names = list(arrays)
    groups = [names[i : i + per_shard] for i in range(0, len(names), per_shard)]
    weight_map = {}
    for number, group in enumerate(groups, 1):
        shard = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        safetensors_numpy.save_file({n: arrays[n] for n in group}, str(directory / shard))
        weight_map.update(dict.fromkeys(group, shard))
    total = sum(a.nbytes for a in arrays.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return directory


def test_inspect_lists_every_shard_and_tensor(tmp_path: Path) -> None:
    arrays = _arrays()
    directory = _hf_set(tmp_path / "set", arrays)
    done = run_cli("inspect", "--json", directory)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["format"] == "safetensors"
    assert report["path"].endswith("model.safetensors.index.json")
    assert {row["name"] for row in report["tensors"]} == set(arrays)
    shards = report["set"]["shards"]
    assert [s["file"] for s in shards] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert [s["tensors"] for s in shards] == [2, 2]
    assert report["file_size"] == sum(s["file_size"] for s in shards)
    by_name = {row["name"]: row for row in report["tensors"]}
    assert by_name["layers.3.weight"]["storage"] == "model-00002-of-00002.safetensors"
    assert report["set"]["ignored"] == []
    text = run_cli("inspect", directory / "model.safetensors.index.json")
    assert "set:      2 shards" in text.stdout
    assert "model-00002-of-00002.safetensors" in text.stdout


def test_inspect_names_what_the_directory_holds_beside_the_set(tmp_path: Path) -> None:
    directory = _hf_set(tmp_path / "set", _arrays())
    stale = {"layers.0.weight": np.zeros((8, 4), np.float32)}
    safetensors_numpy.save_file(stale, str(directory / "model.safetensors"))
    safetensors_numpy.save_file(stale, str(directory / "model-00007-of-00009.safetensors"))
    done = run_cli("inspect", "--json", directory)
    assert done.returncode == 0, done.stderr
    ignored = {entry["file"]: entry["why"] for entry in json.loads(done.stdout)["set"]["ignored"]}
    assert set(ignored) == {"model.safetensors", "model-00007-of-00009.safetensors"}
    assert "stale" in ignored["model.safetensors"]
    assert "SetWarning" not in done.stderr  # the report itself lists them


def test_verify_reads_every_tensor_of_a_set(tmp_path: Path) -> None:
    arrays = _arrays()
    directory = _hf_set(tmp_path / "set", arrays)
    done = run_cli("verify", directory)
    assert done.returncode == 0, done.stderr
    total = sum(a.nbytes for a in arrays.values())
    assert f"ok (safetensors, 4 tensors, {total:,} bytes read)" in done.stdout


def test_verify_fails_a_set_whose_index_and_shards_disagree(tmp_path: Path) -> None:
    arrays = _arrays()
    directory = _hf_set(tmp_path / "set", arrays)
    # Shard 2 loses a tensor the index lists and gains one it does not.
    shard = directory / "model-00002-of-00002.safetensors"
    extra = {"layers.2.weight": arrays["layers.2.weight"], "stowaway": np.ones(3, np.float32)}
    safetensors_numpy.save_file(extra, str(shard))
    done = run_cli("verify", directory)
    assert done.returncode == 2
    assert "FAILED" in done.stdout
    assert "'layers.3.weight': the index puts it in model-00002-of-00002.safetensors" in done.stdout
    assert "'stowaway': model-00002-of-00002.safetensors holds it" in done.stdout


def test_diff_compares_a_set_with_a_single_file(tmp_path: Path) -> None:
    arrays = _arrays()
    directory = _hf_set(tmp_path / "set", arrays)
    single = tmp_path / "single.safetensors"
    safetensors_numpy.save_file(arrays, str(single))
    assert run_cli("diff", directory, single).returncode == 0
    changed = {**arrays, "layers.1.weight": arrays["layers.1.weight"] + 1}
    safetensors_numpy.save_file(changed, str(single))
    done = run_cli("diff", "--json", directory, single)
    assert done.returncode == 1
    assert "layers.1.weight" in done.stdout


def test_convert_a_set_into_one_file(tmp_path: Path) -> None:
    arrays = _arrays()
    directory = _hf_set(tmp_path / "set", arrays, per_shard=1)
    target = tmp_path / "whole.safetensors"
    done = run_cli("convert", directory, target)
    assert done.returncode == 0, done.stderr
    loaded = safetensors_numpy.load_file(str(target))
    assert loaded.keys() == arrays.keys()
    for name, array in arrays.items():
        np.testing.assert_array_equal(loaded[name], array)


def test_a_set_with_a_missing_shard_is_one_error_line(tmp_path: Path) -> None:
    directory = _hf_set(tmp_path / "set", _arrays())
    (directory / "model-00001-of-00002.safetensors").unlink()
    assert_error(run_cli("inspect", directory), 2, "model-00001-of-00002.safetensors")


def test_convert_into_a_set_and_back(tmp_path: Path) -> None:
    arrays = _arrays()
    single = tmp_path / "single.safetensors"
    safetensors_numpy.save_file(arrays, str(single))
    directory = tmp_path / "set"
    nbytes = arrays["layers.0.weight"].nbytes
    done = run_cli("convert", single, directory, "--max-shard-size", 2 * nbytes)
    assert done.returncode == 0, done.stderr
    assert "model.safetensors.index.json" in done.stdout
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in arrays.values())
    back = tmp_path / "back.bpk"
    assert run_cli("convert", directory, back).returncode == 0
    assert run_cli("diff", back, single).returncode == 0


def test_convert_writes_a_burnpack_variant_set(tmp_path: Path) -> None:
    arrays = _arrays()
    single = tmp_path / "single.safetensors"
    safetensors_numpy.save_file(arrays, str(single))
    directory = tmp_path / "set"
    flags = ("--format", "burnpack", "--variant", "fp16", "--max-shard-size", "200")
    done = run_cli("convert", single, directory, *flags)
    assert done.returncode == 0, done.stderr
    files = sorted(path.name for path in directory.iterdir())
    assert files == ["model.bpk.index.fp16.json"] + [
        f"model.fp16-{n:05d}-of-00004.bpk" for n in range(1, 5)
    ]
    assert run_cli("diff", directory, single).returncode == 0


def test_convert_refuses_an_ambiguous_shard_size(tmp_path: Path) -> None:
    single = tmp_path / "single.safetensors"
    safetensors_numpy.save_file(_arrays(), str(single))
    done = run_cli("convert", single, tmp_path / "set", "--max-shard-size", "5Gb")
    assert_error(done, 2, "--max-shard-size", "ambiguous")
    assert not (tmp_path / "set").exists()
