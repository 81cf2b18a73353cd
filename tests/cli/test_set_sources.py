"""Sets as people download them (issue 23): a transformers set converts with the ``format``
its shards carry, sets of any stem are found, a set is written in the format its destination
names, and `inspect` counts and reports a set as its index does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli._support import assert_error, read_metadata, run_cli

safetensors_numpy = pytest.importorskip("safetensors.numpy")

# What transformers 4.x `modeling_utils.load_state_dict` accepts in a SafeTensors file's
# ``format`` (anything else: "does not contain the valid metadata").
TRANSFORMERS_FORMATS = ("pt", "tf", "flax", "mlx")


def _arrays() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(23)
    return {f"layers.{i}.weight": rng.standard_normal((8, 4)).astype(np.float32) for i in range(4)}


def hf_set(directory: Path, stem: str = "model", shard_format: str = "pt") -> Path:
    """A set as transformers saves one: every shard's metadata ``{"format": "pt"}``, the
    index's only ``total_size``."""
    directory.mkdir(parents=True, exist_ok=True)
    arrays, weight_map = _arrays(), {}
    for number, names in enumerate((list(arrays)[:2], list(arrays)[2:]), 1):
        shard = f"{stem}-{number:05d}-of-00002.safetensors"
        tensors = {name: arrays[name] for name in names}
        safetensors_numpy.save_file(tensors, str(directory / shard), {"format": shard_format})
        weight_map.update(dict.fromkeys(names, shard))
    total = sum(array.nbytes for array in arrays.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / f"{stem}.safetensors.index.json").write_text(json.dumps(index))
    return directory


def test_converting_a_transformers_set_keeps_format_pt(tmp_path: Path) -> None:
    source = hf_set(tmp_path / "hf")
    single = tmp_path / "single.safetensors"
    assert run_cli("convert", source, single).returncode == 0
    metadata = read_metadata(single)
    assert metadata["format"] == "pt"
    assert "total_size" not in metadata  # the source index's, not this file's
    resharded = tmp_path / "resharded"
    done = run_cli("convert", source, resharded, "--max-shard-size", "300")
    assert done.returncode == 0, done.stderr
    index = json.loads((resharded / "model.safetensors.index.json").read_text())
    assert index["metadata"]["format"] == "pt"
    for shard in sorted(set(index["weight_map"].values())):
        assert read_metadata(resharded / shard)["format"] == "pt"


def test_a_converted_set_satisfies_transformers_metadata_check(tmp_path: Path) -> None:
    """transformers 4.x's own check (5.x dropped it), run on the converted file."""
    from safetensors import safe_open

    single = tmp_path / "single.safetensors"
    assert run_cli("convert", hf_set(tmp_path / "hf"), single).returncode == 0
    with safe_open(str(single), framework="np") as opened:
        assert opened.metadata().get("format") in TRANSFORMERS_FORMATS


def test_set_metadata_is_the_index_merged_with_what_every_shard_agrees_on(
    tmp_path: Path,
) -> None:
    from weightstore.sets import open_set

    directory = hf_set(tmp_path / "hf")
    shard = directory / "model-00002-of-00002.safetensors"
    tensors = safetensors_numpy.load_file(str(shard))
    safetensors_numpy.save_file(tensors, str(shard), {"format": "pt", "only": "here"})
    with open_set(directory) as reader:
        metadata = reader.metadata()
    assert metadata["format"] == "pt"  # every shard says so
    assert "only" not in metadata  # one shard says so
    assert metadata["total_size"] == str(sum(a.nbytes for a in _arrays().values()))


def test_a_bpk_destination_writes_a_burnpack_set(tmp_path: Path) -> None:
    target = tmp_path / "x.bpk"
    done = run_cli("convert", hf_set(tmp_path / "hf"), target, "--max-shard-size", "300")
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in target.iterdir()) == [
        "model-00001-of-00002.bpk",
        "model-00002-of-00002.bpk",
        "model.bpk.index.json",
    ]
    assert run_cli("diff", target, tmp_path / "hf").returncode == 0


def test_a_set_whose_extension_and_format_disagree_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "x.bpk"
    flags = ("--max-shard-size", "300", "--format", "safetensors")
    done = run_cli("convert", hf_set(tmp_path / "hf"), target, *flags)
    assert_error(done, 2, "x.bpk", "--format safetensors")
    assert not target.exists()


def test_convert_help_says_what_picks_a_sets_format() -> None:
    done = run_cli("convert", "--help")
    text = " ".join(done.stdout.split())
    assert "x.bpk: burnpack" in text
    assert "model.NAME-00001-of-00002" in text


def test_a_tied_tensor_of_a_bin_set_counts_once_in_the_total(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    directory = tmp_path / "bin"
    directory.mkdir()
    embedding = torch.ones(16, 8)
    first, second = "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"
    torch.save({"embed.weight": embedding, "lm_head.weight": embedding}, directory / first)
    torch.save({"layer.weight": torch.zeros(4, 4)}, directory / second)
    weight_map = {"embed.weight": first, "lm_head.weight": first, "layer.weight": second}
    total = embedding.numel() * 4 + 16 * 4  # what huggingface_hub writes: the tie once
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    done = run_cli("inspect", "--json", directory)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total_nbytes"] == total
    text = run_cli("inspect", directory).stdout
    assert f"{total:,} bytes (shared storage counted once" in text


def test_views_of_one_storage_count_the_bytes_they_cover() -> None:
    from weightstore.cli._report import TensorRow, stored_nbytes
    from weightstore.dtypes import from_name

    f32 = from_name("F32")
    rows = [
        TensorRow("whole", f32, (4,), 16, 0, "data/0"),
        TensorRow("tied", f32, (4,), 16, 0, "data/0"),
        TensorRow("tail", f32, (4,), 16, 8, "data/0"),  # overlaps the last 8 bytes
        TensorRow("other", f32, (1,), 4, 0, "data/1"),
        TensorRow("safetensors", f32, (2,), 8, 100, None),
    ]
    assert stored_nbytes(rows) == 24 + 4 + 8


@pytest.mark.parametrize("keep", [100, 5])  # a cut JSON header; a cut header length
def test_inspect_lists_the_healthy_shards_and_marks_a_truncated_one(
    tmp_path: Path, keep: int
) -> None:
    directory = hf_set(tmp_path / "hf")
    bad = directory / "model-00002-of-00002.safetensors"
    bad.write_bytes(bad.read_bytes()[:keep])
    done = run_cli("inspect", directory)
    assert_error(done, 2, "model-00002-of-00002.safetensors", "cannot be read")
    assert "layers.0.weight" in done.stdout and "layers.1.weight" in done.stdout
    assert "layers.2.weight" not in done.stdout
    damaged = [line for line in done.stdout.splitlines() if "DAMAGED" in line]
    assert len(damaged) == 1 and "model-00002-of-00002.safetensors" in damaged[0]
    as_json = run_cli("inspect", "--json", directory)
    assert as_json.returncode == 2
    summary = json.loads(as_json.stdout)["set"]
    assert [entry["file"] for entry in summary["damaged"]] == [bad.name]
    assert [shard["tensors"] for shard in summary["shards"]] == [2, 0]
