"""Rank-aware saves with ranks as threads (`_threads.ThreadRanks`): the agreement, ordering
and failure rules of `weightstore.distributed.save`, without spawning processes.

The process-group tests (test_process_groups.py) save real DTensor models over gloo; here the
collectives are stand-ins that fail when two ranks run different ones at one step.
"""

from __future__ import annotations

import errno
import functools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.distributed._threads import RankGroup, ThreadRanks
from weightstore import BurnpackStore, SafetensorsStore
from weightstore.burnpack import BurnpackReader
from weightstore.distributed import _save, save
from weightstore.distributed._save import assign_owners, interleave
from weightstore.errors import DestinationExistsError, InvalidOptionError, SaveFailedError
from weightstore.safetensors import SafetensorsReader
from weightstore.sets import _writer
from weightstore.snapshot import TensorSnapshot

SET_ID = "weightstore.set_id"


def _model(version: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    """Tensors of mixed dtypes and sizes, named so the SafeTensors writer's order (dtype rank,
    then name) differs from the order given."""
    rng = np.random.default_rng(version)
    return {
        "z.weight": rng.standard_normal((9, 4)).astype(np.float32),
        "a.weight": rng.standard_normal((5, 3)).astype(np.float16),
        "m.weight": rng.standard_normal((7,)).astype(np.float64),
        "b.bias": rng.standard_normal((6,)).astype(np.float32),
        "k.index": np.arange(8, dtype=np.int64) + version,
        "c.scale": rng.standard_normal((2, 2)).astype(np.float32),
    }


def _read_set(directory: Path) -> dict[str, np.ndarray[Any, Any]]:
    """The set's tensors as the index places them, each shard read by our single-file reader
    and checked to carry the index's set id."""
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    for shard in sorted(set(index["weight_map"].values())):
        with SafetensorsReader.from_file(directory / shard) as reader:
            assert reader.metadata()[SET_ID] == index["metadata"][SET_ID]
            tensors.update({name: np.array(reader.get(name)) for name in reader.names()})
    assert set(tensors) == set(index["weight_map"])
    return tensors


def _save_all(ranks: ThreadRanks, store: Any, models: Any) -> list[tuple[bool, Any]]:
    return ranks.run(lambda rank, group: save(store, models(rank, group), group=group))


def test_owners_balance_bytes_and_interleave_takes_turns() -> None:
    assert assign_owners([100, 10, 60, 50], 2) == [0, 0, 1, 1]  # 110 bytes each
    assert assign_owners([5, 5, 5], 4) == [0, 1, 2]  # ranks past the tensors own nothing
    assert interleave([[0, 3, 4], [1], [2, 5]]) == [0, 1, 2, 3, 5, 4]
    assert interleave([]) == []


def test_a_replicated_model_is_written_once_split_among_the_ranks(tmp_path: Path) -> None:
    model = _model()
    store = SafetensorsStore.from_file(tmp_path / "set").with_metadata("run", "7")
    outcomes = _save_all(ThreadRanks(3), store, lambda rank, group: model)
    index_path = str(tmp_path / "set" / "model.safetensors.index.json")
    assert outcomes == [(True, index_path)] * 3
    index = json.loads(Path(index_path).read_text())
    assert index["metadata"]["run"] == "7"
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in model.values())
    assert len(set(index["weight_map"].values())) == 3  # one shard per rank
    got = _read_set(tmp_path / "set")
    assert set(got) == set(model)
    for name, array in model.items():
        assert got[name].dtype == array.dtype and np.array_equal(got[name], array), name


def _collective_read(group: RankGroup, name: str, array: Any) -> Any:
    group.collective(name)
    return array


@pytest.mark.parametrize("max_shard_size", [None, 100])
def test_every_rank_runs_every_gather_in_one_order_while_each_writes_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_shard_size: int | None
) -> None:
    model = _model()
    ranks = ThreadRanks(3)

    def snapshots(store: Any, given: Any) -> tuple[list[TensorSnapshot], str | None, bool]:
        _, group = given
        out = []
        for name, array in model.items():
            read = functools.partial(_collective_read, group, name, array)
            out.append(TensorSnapshot(tuple(name.split(".")), *_described(array), read))
        return out, "pt", True

    monkeypatch.setattr(_save, "_snapshots", snapshots)
    store = SafetensorsStore.from_file(tmp_path / "set")
    if max_shard_size is not None:
        store = store.with_max_shard_size(max_shard_size)  # several shards per rank
    outcomes = _save_all(ranks, store, lambda rank, group: (rank, group))
    assert all(ok for ok, _ in outcomes), outcomes
    assert ranks.steps[0] == ranks.steps[1] == ranks.steps[2]  # one shared sequence
    assert sorted(ranks.steps[0]) == sorted(model)  # each tensor gathered exactly once
    got = _read_set(tmp_path / "set")
    assert all(np.array_equal(got[name], array) for name, array in model.items())


def _described(array: np.ndarray[Any, Any]) -> tuple[Any, tuple[int, ...]]:
    snapshot = TensorSnapshot.from_array("x", array)
    return snapshot.dtype, snapshot.shape


def _old_set(directory: Path) -> dict[str, float]:
    """Save version 0 of the model as a set of two ranks; each file's modification time."""
    store = SafetensorsStore.from_file(directory)
    assert all(ok for ok, _ in _save_all(ThreadRanks(2), store, lambda *_: _model(0)))
    return {name: os.stat(directory / name).st_mtime for name in os.listdir(directory)}


def test_a_failed_rank_stops_the_commit_everywhere_and_the_old_set_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "set"
    before = _old_set(directory)
    real_write = _writer.write_shard

    def write_shard(plan: Any, number: int, entries: Any, *args: Any, **kwargs: Any) -> Any:
        if number == 1:  # rank 0's shard: the disk fills up half way
            entries[0].read()
            raise SaveFailedError(plan.shard_path(number), errno.ENOSPC)
        return real_write(plan, number, entries, *args, **kwargs)

    monkeypatch.setattr(_writer, "write_shard", write_shard)
    store = SafetensorsStore.from_file(directory).overwrite()
    outcomes = _save_all(ThreadRanks(3), store, lambda rank, group: _model(1))
    errors = [error for _, error in outcomes]
    assert not any(ok for ok, _ in outcomes)
    assert isinstance(errors[0], SaveFailedError) and errors[0].errno == errno.ENOSPC
    for error in errors[1:]:  # the others name the rank that failed, and why
        assert isinstance(error, SaveFailedError) and "rank 0 failed" in str(error), error
        assert "No space left on device" in str(error)
    after = {n: os.stat(directory / n).st_mtime for n in os.listdir(directory)}
    assert after == before  # the other ranks' shards removed, the old set untouched
    got = _read_set(directory)
    assert all(np.array_equal(got[name], array) for name, array in _model(0).items())


def test_an_existing_set_is_refused_on_every_rank_without_overwrite(tmp_path: Path) -> None:
    before = _old_set(tmp_path / "set")
    store = SafetensorsStore.from_file(tmp_path / "set")
    outcomes = _save_all(ThreadRanks(2), store, lambda rank, group: _model(1))
    assert all(not ok and isinstance(error, DestinationExistsError) for ok, error in outcomes)
    assert sorted(os.listdir(tmp_path / "set")) == sorted(before)


def test_ranks_holding_different_tensors_are_refused_on_every_rank(tmp_path: Path) -> None:
    def models(rank: int, group: RankGroup) -> Any:
        model = _model()
        model["z.weight"] = model["z.weight"][: 9 - rank]  # a rank's slice, not the tensor
        return model

    outcomes = _save_all(ThreadRanks(2), SafetensorsStore.from_file(tmp_path / "s"), models)
    for ok, error in outcomes:
        assert not ok and isinstance(error, InvalidOptionError), error
        assert "'z.weight'" in str(error) and "make it a DTensor" in str(error)
    assert not (tmp_path / "s").exists()


def test_store_options_apply_to_a_rank_aware_save(tmp_path: Path) -> None:
    store = (
        SafetensorsStore.from_file(tmp_path / "set")
        .with_regex(r"weight$")
        .with_key_remapping(r"^(\w)\.", r"layer_$1.")
    )
    outcomes = _save_all(ThreadRanks(2), store, lambda rank, group: _model())
    assert all(ok for ok, _ in outcomes), outcomes
    got = _read_set(tmp_path / "set")
    assert sorted(got) == ["layer_a.weight", "layer_m.weight", "layer_z.weight"]
    assert np.array_equal(got["layer_z.weight"], _model()["z.weight"])


def test_burnpack_sets_are_written_by_ranks_in_burn_layout(tmp_path: Path) -> None:
    model = {k: v for k, v in _model().items() if v.dtype != np.float64}
    outcomes = _save_all(ThreadRanks(2), BurnpackStore.from_file(tmp_path / "bp"), lambda *_: model)
    assert outcomes == [(True, str(tmp_path / "bp" / "model.bpk.index.json"))] * 2
    index = json.loads((tmp_path / "bp" / "model.bpk.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [
        "model-00001-of-00002.bpk",
        "model-00002-of-00002.bpk",
    ]
    for shard in set(index["weight_map"].values()):
        with BurnpackReader.from_file(tmp_path / "bp" / shard) as reader:
            assert reader.metadata()[SET_ID] == index["metadata"][SET_ID]
            for name in reader.names():
                assert np.array_equal(reader.get(name), model[name])


def test_one_rank_writes_the_single_file_as_a_one_process_save_does(tmp_path: Path) -> None:
    outcomes = _save_all(
        ThreadRanks(1), SafetensorsStore.from_file(tmp_path / "s"), lambda *_: _model()
    )
    assert outcomes == [(True, str(tmp_path / "s" / "model.safetensors"))]
    assert os.listdir(tmp_path / "s") == ["model.safetensors"]


def test_a_replicated_torch_model_is_saved_from_its_ranks_as_torch_saves_it(
    tmp_path: Path,
) -> None:
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
    outcomes = _save_all(
        ThreadRanks(2), SafetensorsStore.from_file(tmp_path / "s"), lambda *_: model
    )
    assert all(ok for ok, _ in outcomes), outcomes
    index = json.loads((tmp_path / "s" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["format"] == "pt"  # transformers refuses any other
    state = model.state_dict()
    for shard in set(index["weight_map"].values()):
        for name, tensor in safetensors_torch.load_file(tmp_path / "s" / shard).items():
            assert torch.equal(tensor, state[name]), name
    assert sorted(index["weight_map"]) == sorted(state)
