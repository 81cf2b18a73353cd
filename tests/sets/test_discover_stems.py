"""Sets under other stems than the formats' own (issue 23): diffusers'
``diffusion_pytorch_model-0000N-of-0000M.safetensors`` with its index, a lone weight file of
any name. Found when the directory holds no set of the formats' own names; several such
candidates are named and none is guessed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from weightstore import Store, safetensors
from weightstore.entry import TensorEntry
from weightstore.errors import SetError, UnsupportedFormatError
from weightstore.locate import Kind, locate
from weightstore.sets import find_set, open_set
from weightstore.sets._discover import WHY_OTHER_VARIANT

DIFFUSERS = "diffusion_pytorch_model"


def _weights(path: Path, value: float = 1.0) -> Path:
    safetensors.write_file(path, [TensorEntry.from_array("w", np.full(3, value, np.float32))])
    return path


def _sharded(directory: Path, stem: str, count: int = 3) -> Path:
    weight_map = {}
    for number in range(1, count + 1):
        shard = f"{stem}-{number:05d}-of-{count:05d}.safetensors"
        entry = TensorEntry.from_array(f"t{number}", np.full(2, number, np.float32))
        safetensors.write_file(directory / shard, [entry])
        weight_map[f"t{number}"] = shard
    index = directory / f"{stem}.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 8 * count}, "weight_map": weight_map}))
    return index


def test_a_diffusers_sharded_set_is_found(tmp_path: Path) -> None:
    index = _sharded(tmp_path, DIFFUSERS)
    assert find_set(tmp_path).index_path == str(index)
    with open_set(tmp_path) as reader:
        assert reader.names() == ["t1", "t2", "t3"]
    location = locate(tmp_path)
    assert location.kind is Kind.SET and location.index == str(index)
    with Store.from_file(tmp_path) as store:
        assert store.keys() == ["t1", "t2", "t3"]


def test_a_lone_weight_file_of_any_name_is_found(tmp_path: Path) -> None:
    single = _weights(tmp_path / f"{DIFFUSERS}.safetensors")
    (tmp_path / "config.json").write_text("{}")
    assert find_set(tmp_path).single_path == str(single)
    with Store.from_file(tmp_path) as store:
        np.testing.assert_array_equal(
            store.get_all_snapshots()["w"].to_numpy(), np.ones(3, np.float32)
        )


def test_several_candidates_are_named_and_none_is_guessed(tmp_path: Path) -> None:
    _sharded(tmp_path, DIFFUSERS)
    _weights(tmp_path / "ema.safetensors")
    with pytest.raises(SetError) as caught:
        find_set(tmp_path)
    detail = caught.value.detail
    assert f"{DIFFUSERS}.safetensors.index.json" in detail and "ema.safetensors" in detail
    assert "open one by its path" in detail


def test_an_index_whose_shards_are_absent_is_no_candidate(tmp_path: Path) -> None:
    _sharded(tmp_path, "gone")
    for shard in tmp_path.glob("gone-*"):
        shard.unlink()
    single = _weights(tmp_path / "weights.safetensors")
    assert find_set(tmp_path).single_path == str(single)


def test_the_formats_own_names_still_win(tmp_path: Path) -> None:
    _sharded(tmp_path, DIFFUSERS)
    single = _weights(tmp_path / "model.safetensors")
    assert find_set(tmp_path).single_path == str(single)


def test_a_variant_of_another_stem_is_its_variant(tmp_path: Path) -> None:
    plain = _weights(tmp_path / f"{DIFFUSERS}.safetensors")
    half = _weights(tmp_path / f"{DIFFUSERS}.fp16.safetensors", 2.0)
    location = find_set(tmp_path)
    assert location.single_path == str(plain)
    assert (str(half), WHY_OTHER_VARIANT) in location.ignored
    assert find_set(tmp_path, variant="fp16").single_path == str(half)


def test_a_lone_pytorch_checkpoint_is_found(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "checkpoint.pt"
    torch.save({"w": torch.ones(2)}, path)
    with Store.from_file(tmp_path) as store:
        assert store.keys() == ["w"]


def test_an_empty_directory_says_it_looked_for_other_stems(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SetError, match="any one weight file"):
        find_set(tmp_path)


def test_a_directory_with_no_weights_says_nothing_is_there_to_load(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UnsupportedFormatError) as caught:
        Store.from_file(tmp_path)
    detail = caught.value.detail
    assert "nothing to load" in detail
    assert "model.safetensors" in detail and "pytorch_model.bin" in detail
    assert detail.endswith("*.ckpt)")  # what was looked for comes last, not how to save


def test_the_search_of_other_stems_looks_at_each_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of stray shards of distinct stems: each stem's search sees its own files
    only, not the whole directory again (which is quadratic in the directory's size)."""
    from weightstore.sets import _discover

    count = 2_000
    for number in range(count):
        (tmp_path / f"s{number}-00001-of-00002.safetensors").touch()
    seen: list[int] = []
    original = _discover._find_in

    def counting(directory: str, files: list[str], *args: object, **kwargs: object) -> object:
        seen.append(len(files))
        return original(directory, files, *args, **kwargs)

    monkeypatch.setattr(_discover, "_find_in", counting)
    with pytest.raises(SetError, match="holds no checkpoint set"):
        find_set(tmp_path)
    standard = 3  # the formats' own names, searched over every file
    assert sum(seen) <= (standard + 1) * count
