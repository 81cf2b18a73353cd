"""Writing sharded sets (`weightstore.sets._writer`) and the store options that ask for one.

Sets are checked by hand here (the index's JSON, each shard opened alone with the container
readers and with the `safetensors` package), so these tests do not lean on the set reader.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from weightstore import BurnpackStore, PytorchStore, SafetensorsStore, burnpack, safetensors
from weightstore.dtypes import from_name
from weightstore.entry import TensorEntry
from weightstore.errors import (
    DestinationExistsError,
    DTypeError,
    EntryError,
    InvalidOptionError,
    SaveFailedError,
)
from weightstore.sets import (
    SET_ID_KEY,
    commit_set,
    layout_for,
    parse_shard_name,
    plan_set,
    plan_shards,
    write_set,
    write_shard,
)

SAFETENSORS = layout_for("safetensors")
BURNPACK = layout_for("burnpack")
F32 = from_name("F32")
KB = 1000


def _arrays(seed: int, count: int = 8, numel: int = 250) -> dict[str, np.ndarray]:
    """`count` float32 tensors of `numel` elements (1 KB each by default), values from `seed`."""
    rng = np.random.default_rng(seed)
    return {
        f"layers.{i}.weight": rng.standard_normal(numel).astype(np.float32) for i in range(count)
    }


def _entries(arrays: dict[str, np.ndarray]) -> list[TensorEntry]:
    return [TensorEntry.from_array(name, array) for name, array in arrays.items()]


def _save(
    directory: Path,
    arrays: dict[str, np.ndarray],
    max_shard_size: int,
    *,
    overwrite: bool = True,
    metadata: dict[str, str] | None = None,
    variant: str | None = None,
    layout: Any = SAFETENSORS,
    fmt: Any = safetensors.FORMAT,
) -> str:
    return write_set(
        directory,
        layout,
        fmt,
        _entries(arrays),
        max_shard_size=max_shard_size,
        metadata={} if metadata is None else metadata,
        overwrite=overwrite,
        durable=False,
        variant=variant,
    )


def _read_set(directory: Path, variant: str | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """The tensors and index metadata of a SafeTensors set, read by hand: the index when there
    is one (each shard's set id checked against it), else the single file."""
    safe_open = need("safetensors").safe_open  # the package as the independent reader

    index_path = directory / SAFETENSORS.index_name(variant)
    if not index_path.exists():
        with safe_open(directory / SAFETENSORS.single_name(variant), "np") as file:
            names = file.keys()  # a safe_open handle is no mapping: no `in file`
            return {name: file.get_tensor(name) for name in names}, file.metadata()
    index = json.loads(index_path.read_text())
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(directory / shard, "np") as file:
            assert file.metadata()[SET_ID_KEY] == index["metadata"][SET_ID_KEY], shard
            listed = {n for n, s in index["weight_map"].items() if s == shard}
            assert set(file.keys()) == listed, shard
            names = file.keys()
            tensors.update({name: file.get_tensor(name) for name in names})
    return tensors, index["metadata"]


def _assert_same(found: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(found) == sorted(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(found[name], array, err_msg=name)


def _files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


# -- planning -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_shards_are_planned_as_huggingface_hub_plans_them(seed: int) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import split_torch_state_dict_into_shards

    rng = random.Random(seed)
    max_shard_size = rng.choice([40, 100, 256, 1000])
    numels = [rng.choice([1, 3, 10, 25, 64, 100, 300]) for _ in range(rng.randint(1, 30))]
    state = {f"t{i}": torch.zeros(n) for i, n in enumerate(numels)}
    theirs = split_torch_state_dict_into_shards(state, max_shard_size=max_shard_size)
    ours = plan_shards(
        [TensorEntry(name, F32, tuple(t.shape), b"") for name, t in state.items()], max_shard_size
    )
    names = [[entry.name for entry in shard] for shard in ours]
    assert names == list(theirs.filename_to_tensors.values())
    if len(ours) > 1:  # and the same file names
        shard_names = [SAFETENSORS.shard_name(n, len(ours)) for n in range(1, len(ours) + 1)]
        assert shard_names == list(theirs.filename_to_tensors)


def test_a_tensor_over_the_limit_is_alone_and_sizes_come_from_dtype_and_shape() -> None:
    def never() -> bytes:
        raise AssertionError("planning read data")

    entries = [
        TensorEntry(name, F32, (n,), never) for name, n in [("a", 10), ("b", 500), ("c", 10)]
    ]
    shards = plan_shards(entries, 100)
    assert [[e.name for e in shard] for shard in shards] == [["b"], ["a", "c"]]


def test_no_entries_plan_one_empty_shard() -> None:
    assert plan_shards([], 100) == [[]]


@pytest.mark.parametrize("size", [0, -1, True, "5GB"])
def test_plan_shards_refuses_a_size_that_is_not_positive_bytes(size: Any) -> None:
    with pytest.raises(InvalidOptionError):
        plan_shards([], size)


def test_a_plan_pickles_to_another_process_as_is(tmp_path: Path) -> None:
    plan = plan_set(tmp_path, SAFETENSORS, 3, overwrite=False)
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert len(plan.set_id) == 32 and int(plan.set_id, 16) >= 0
    assert plan.shard_names == tuple(SAFETENSORS.shard_name(n, 3) for n in (1, 2, 3))
    assert not plan.single
    assert plan_set(tmp_path, SAFETENSORS, 1, overwrite=False).single


# -- the layout on disk ---------------------------------------------------------------------------


def test_a_set_has_the_hf_layout_an_id_in_index_and_shards_and_metadata_in_the_index(
    tmp_path: Path,
) -> None:
    arrays = _arrays(0)
    path = _save(tmp_path, arrays, 3 * KB, metadata={"format": "pt", "note": "hello"})
    assert path == str(tmp_path / "model.safetensors.index.json")
    assert _files(tmp_path) == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    tensors, metadata = _read_set(tmp_path)
    _assert_same(tensors, arrays)
    assert metadata["total_size"] == 8 * KB
    assert metadata["note"] == "hello" and metadata["format"] == "pt"
    assert len(metadata[SET_ID_KEY]) == 32
    index = json.loads(Path(path).read_text())
    assert list(index) == ["metadata", "weight_map"]
    assert list(index["weight_map"]) == sorted(arrays)


def test_reserved_keys_in_user_metadata_describe_another_set_and_are_dropped(
    tmp_path: Path,
) -> None:
    stale = {"total_size": "12", SET_ID_KEY: "0" * 32, "kept": "yes"}
    _save(tmp_path, _arrays(0), 3 * KB, metadata=stale)
    _, metadata = _read_set(tmp_path)  # checks every shard's id against the index's
    assert metadata["total_size"] == 8 * KB and metadata[SET_ID_KEY] != "0" * 32
    assert metadata["kept"] == "yes"


def test_everything_in_one_shard_is_the_single_file_without_an_index(tmp_path: Path) -> None:
    arrays = _arrays(1)
    path = _save(tmp_path, arrays, 10**6, metadata={"format": "pt"})
    assert path == str(tmp_path / "model.safetensors")
    assert _files(tmp_path) == ["model.safetensors"]
    tensors, metadata = _read_set(tmp_path)
    _assert_same(tensors, arrays)
    assert metadata["format"] == "pt" and SET_ID_KEY in metadata


def test_an_empty_model_is_an_empty_single_file(tmp_path: Path) -> None:
    assert _save(tmp_path, {}, 100) == str(tmp_path / "model.safetensors")
    assert _read_set(tmp_path)[0] == {}


def test_a_variant_names_shards_index_and_single_file(tmp_path: Path) -> None:
    _save(tmp_path / "a", _arrays(0), 4 * KB, variant="fp16")
    assert _files(tmp_path / "a") == [
        "model.fp16-00001-of-00002.safetensors",
        "model.fp16-00002-of-00002.safetensors",
        "model.safetensors.index.fp16.json",
    ]
    _save(tmp_path / "b", _arrays(0), 10**6, variant="fp16")
    assert _files(tmp_path / "b") == ["model.fp16.safetensors"]


def test_the_directory_is_created_with_its_parents(tmp_path: Path) -> None:
    _save(tmp_path / "a" / "b", _arrays(0), 4 * KB)
    assert "model.safetensors.index.json" in _files(tmp_path / "a" / "b")


def test_a_file_where_the_directory_goes_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ckpt").write_bytes(b"not a directory")
    with pytest.raises(SaveFailedError) as caught:
        _save(tmp_path / "ckpt", _arrays(0), 4 * KB)
    assert caught.value.path == str(tmp_path / "ckpt")


def test_durable_saves_write_the_same_set(tmp_path: Path) -> None:
    arrays = _arrays(2)
    write_set(
        tmp_path / "new",
        SAFETENSORS,
        safetensors.FORMAT,
        _entries(arrays),
        max_shard_size=3 * KB,
        metadata={},
        overwrite=False,
        durable=True,
    )
    _assert_same(_read_set(tmp_path / "new")[0], arrays)


def test_burnpack_shards_each_open_alone_as_burnpack_files(tmp_path: Path) -> None:
    arrays = _arrays(3)
    path = _save(tmp_path, arrays, 3 * KB, layout=BURNPACK, fmt=burnpack.FORMAT)
    assert path == str(tmp_path / "model.bpk.index.json")
    index = json.loads(Path(path).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-0000{n}-of-00003.bpk" for n in (1, 2, 3)]
    found: dict[str, np.ndarray] = {}
    for shard in shards:
        with burnpack.BurnpackReader.from_file(tmp_path / shard) as reader:
            assert reader.metadata()[SET_ID_KEY] == index["metadata"][SET_ID_KEY]
            assert all(reader.descriptor(n).param_id is not None for n in reader.names())
            found.update({name: np.array(reader.get(name)) for name in reader.names()})
    _assert_same(found, arrays)


# -- saving over a set: names, cleanup, old-or-new -------------------------------------------------


def test_a_resave_never_reuses_a_name_the_committed_index_holds(tmp_path: Path) -> None:
    _save(tmp_path, _arrays(0), 3 * KB)
    first = _files(tmp_path)
    _save(tmp_path, _arrays(1), 3 * KB)  # same count: the plain names are taken
    second = _files(tmp_path)
    assert not set(first) & set(second) - {"model.safetensors.index.json"}
    tags = {parse_shard_name(name).tag for name in second if name.endswith(".safetensors")}
    assert len(tags) == 1 and None not in tags
    _assert_same(_read_set(tmp_path)[0], _arrays(1))
    _save(tmp_path, _arrays(2), 3 * KB)  # the plain names are free again
    assert _files(tmp_path) == first
    _assert_same(_read_set(tmp_path)[0], _arrays(2))


@pytest.mark.parametrize(
    ("before", "after"),
    [(3 * KB, 2 * KB), (2 * KB, 4 * KB), (3 * KB, 10**6), (10**6, 3 * KB), (10**6, 10**6)],
    ids=["3-to-4-shards", "4-to-2", "sharded-to-single", "single-to-sharded", "single-to-single"],
)
def test_a_resave_leaves_exactly_the_new_set(tmp_path: Path, before: int, after: int) -> None:
    directory, fresh = tmp_path / "set", tmp_path / "fresh"
    _save(directory, _arrays(0), before)
    (directory / "config.json").write_text("{}")
    _save(directory, _arrays(1), after)
    _save(fresh, _arrays(1), after)
    # The files of a save into an empty directory (up to the tag a name may carry), and
    # the file that is not the set's.
    found = sorted(_untagged(name) for name in _files(directory))
    assert found == sorted([*_files(fresh), "config.json"])
    _assert_same(_read_set(directory)[0], _arrays(1))


def _untagged(name: str) -> str:
    shard = parse_shard_name(name)
    if shard is None or shard.tag is None:
        return name
    return name.replace(f".{shard.tag}.", ".")


def test_leftovers_of_killed_saves_are_removed_and_nothing_else(tmp_path: Path) -> None:
    _save(tmp_path, _arrays(0), 3 * KB)
    committed = _files(tmp_path)
    dead_pid = _dead_pid()
    leftovers = [
        "model-00001-of-00002.safetensors",  # a stray shard of a killed save
        "model-00002-of-00005.0123abcd.safetensors",
        f"model-00001-of-00002.safetensors.{dead_pid}-0.tmp",  # a scratch file of one
        f"model.safetensors.index.json.{dead_pid}-3.tmp",
    ]
    others = [
        "config.json",
        "model.fp16-00001-of-00002.safetensors",  # another variant's set
        "model.safetensors.index.fp16.json",
        "pytorch_model-00001-of-00002.bin",  # another format's set
        "model-00001-of-00002.safetensors.bak",
        "notes.txt.123-0.tmp",  # another file's scratch name
        f"model-00001-of-00002.safetensors.{os.getpid()}-9.tmp",  # a live writer's
    ]
    for name in leftovers + others:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "model-00009-of-00009.safetensors").mkdir()  # a directory is never removed
    _save(tmp_path, _arrays(1), 3 * KB)
    remaining = set(_files(tmp_path))
    assert not remaining & set(leftovers)
    assert set(others) | {"model-00009-of-00009.safetensors"} <= remaining
    assert not remaining & set(committed) - {"model.safetensors.index.json"}  # superseded


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                           capture_output=True, text=True)  # fmt: skip
    return int(child.stdout)


def test_an_unreadable_committed_index_keeps_its_files_until_the_commit(tmp_path: Path) -> None:
    for name in ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    plan = plan_set(tmp_path, SAFETENSORS, 2, overwrite=True)
    assert "model-00001-of-00002.safetensors" in _files(tmp_path)  # maybe live: kept
    assert all(parse_shard_name(name).tag == plan.set_id[:8] for name in plan.shard_names)
    _save(tmp_path, _arrays(1), 4 * KB)
    _assert_same(_read_set(tmp_path)[0], _arrays(1))
    assert len(_files(tmp_path)) == 3  # the unreadable set's shards went with the commit


def test_a_foreign_index_naming_the_single_file_makes_a_one_shard_set(tmp_path: Path) -> None:
    _save(tmp_path, _arrays(0), 10**6)
    index = {"metadata": {}, "weight_map": {"layers.0.weight": "model.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    path = _save(tmp_path, _arrays(1), 10**6)
    assert path == str(tmp_path / "model.safetensors.index.json")
    names = [n for n in _files(tmp_path) if n != "model.safetensors.index.json"]
    assert len(names) == 1 and parse_shard_name(names[0]).count == 1
    _assert_same(_read_set(tmp_path)[0], _arrays(1))


@pytest.mark.parametrize("existing", [3 * KB, 10**6], ids=["set", "single-file"])
def test_without_overwrite_an_existing_set_is_refused_and_kept(
    tmp_path: Path, existing: int
) -> None:
    _save(tmp_path, _arrays(0), existing)
    before = _files(tmp_path)
    with pytest.raises(DestinationExistsError) as caught:
        _save(tmp_path, _arrays(1), 3 * KB, overwrite=False)
    assert os.path.dirname(caught.value.path) == str(tmp_path)
    assert _files(tmp_path) == before
    _assert_same(_read_set(tmp_path)[0], _arrays(0))


def test_without_overwrite_stray_shards_and_other_variants_are_no_set(tmp_path: Path) -> None:
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"stray")
    _save(tmp_path, _arrays(0), 10**6, variant="fp16")
    _save(tmp_path, _arrays(1), 4 * KB, overwrite=False)
    _assert_same(_read_set(tmp_path)[0], _arrays(1))
    _assert_same(_read_set(tmp_path, "fp16")[0], _arrays(0))


# -- refusals before a byte, and failures part way -------------------------------------------------


def test_duplicate_names_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    entries = _entries(_arrays(0)) + _entries(_arrays(1))[:1]
    with pytest.raises(EntryError) as caught:
        write_set(tmp_path, SAFETENSORS, safetensors.FORMAT, entries, max_shard_size=2 * KB,
                  metadata={}, overwrite=True, durable=False)  # fmt: skip
    assert caught.value.tensor == "layers.0.weight"
    assert _files(tmp_path) == []


def test_a_dtype_the_format_cannot_hold_is_refused_before_any_shard(tmp_path: Path) -> None:
    _save(tmp_path, _arrays(0), 3 * KB)
    before = _files(tmp_path)
    entries = _entries(_arrays(1))
    entries.append(TensorEntry("complex", from_name("C128"), (4,), bytes(64)))
    with pytest.raises(DTypeError):
        write_set(tmp_path, SAFETENSORS, safetensors.FORMAT, entries, max_shard_size=3 * KB,
                  metadata={}, overwrite=True, durable=False)  # fmt: skip
    assert _files(tmp_path) == before
    _assert_same(_read_set(tmp_path)[0], _arrays(0))


def test_a_save_failing_part_way_removes_its_shards_and_keeps_the_old_set(tmp_path: Path) -> None:
    _save(tmp_path, _arrays(0), 3 * KB)
    before = _files(tmp_path)

    def broken() -> np.ndarray:
        raise OSError("the source disk went away")

    entries = _entries(_arrays(1))
    entries[-1] = TensorEntry(entries[-1].name, F32, (250,), broken)
    with pytest.raises(OSError, match="went away"):
        write_set(tmp_path, SAFETENSORS, safetensors.FORMAT, entries, max_shard_size=3 * KB,
                  metadata={}, overwrite=True, durable=False)  # fmt: skip
    assert _files(tmp_path) == before
    _assert_same(_read_set(tmp_path)[0], _arrays(0))


def test_an_index_that_cannot_be_written_leaves_the_old_set_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from weightstore.sets import _writer

    _save(tmp_path, _arrays(0), 3 * KB)
    before = _files(tmp_path)
    plain = _writer.write_atomic

    def full_disk(destination: str, *args: Any, **kwargs: Any) -> str:
        if destination.endswith(".json"):
            raise SaveFailedError(destination, 28)  # ENOSPC
        return plain(destination, *args, **kwargs)

    monkeypatch.setattr(_writer, "write_atomic", full_disk)
    with pytest.raises(SaveFailedError):
        _save(tmp_path, _arrays(1), 3 * KB)
    assert _files(tmp_path) == before
    _assert_same(_read_set(tmp_path)[0], _arrays(0))


def test_a_failure_after_the_index_is_renamed_keeps_the_new_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from weightstore.io import _atomic

    _save(tmp_path, _arrays(0), 3 * KB)
    plain = _atomic._fsync_directory

    def failing_fsync(scratch: Any, destination: str) -> None:
        if destination.endswith(".json"):
            raise OSError(5, "Input/output error")  # after the rename: the set is committed
        plain(scratch, destination)

    monkeypatch.setattr(_atomic, "_fsync_directory", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        write_set(tmp_path, SAFETENSORS, safetensors.FORMAT, _entries(_arrays(1)),
                  max_shard_size=3 * KB, metadata={}, overwrite=True, durable=True)  # fmt: skip
    _assert_same(_read_set(tmp_path)[0], _arrays(1))  # its shards were not removed


def test_commit_refuses_a_weight_map_naming_files_outside_the_plan(tmp_path: Path) -> None:
    plan = plan_set(tmp_path, SAFETENSORS, 2, overwrite=True)
    with pytest.raises(EntryError, match="not a shard of this save"):
        commit_set(plan, {"w": "other.safetensors"}, {}, total_size=0, durable=False)
    assert _files(tmp_path) == []


@pytest.mark.parametrize("count", [0, -2])
def test_plan_set_refuses_no_shards(tmp_path: Path, count: int) -> None:
    with pytest.raises(InvalidOptionError):
        plan_set(tmp_path, SAFETENSORS, count, overwrite=True)


def test_plan_set_refuses_a_malformed_variant(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        plan_set(tmp_path, SAFETENSORS, 2, variant="../x", overwrite=True)
    assert caught.value.option == "variant"


# -- the parts one by one, as a distributed save uses them ---------------------------------------


def test_plan_write_commit_by_hand_in_any_shard_order(tmp_path: Path) -> None:
    arrays = _arrays(4)
    groups = plan_shards(_entries(arrays), 3 * KB)
    plan = plan_set(tmp_path, SAFETENSORS, len(groups), overwrite=False)
    plan = pickle.loads(pickle.dumps(plan))  # as another process receives it
    weight_map: dict[str, str] = {}
    for number in reversed(range(1, len(groups) + 1)):
        sizes = write_shard(plan, number, groups[number - 1], safetensors.FORMAT,
                            metadata={"format": "pt"}, durable=False)  # fmt: skip
        weight_map.update(dict.fromkeys(sizes, plan.shard_names[number - 1]))
    assert "model.safetensors.index.json" not in _files(tmp_path)  # nothing committed yet
    path = commit_set(plan, weight_map, {"run": "7"}, total_size=8 * KB, durable=False)
    tensors, metadata = _read_set(Path(path).parent)
    _assert_same(tensors, arrays)
    assert metadata["run"] == "7" and metadata[SET_ID_KEY] == plan.set_id


def test_a_shard_name_taken_after_planning_is_not_overwritten(tmp_path: Path) -> None:
    plan = plan_set(tmp_path, SAFETENSORS, 2, overwrite=True)
    Path(plan.shard_path(1)).write_bytes(b"someone else's")
    with pytest.raises(DestinationExistsError):
        write_shard(plan, 1, _entries(_arrays(0))[:2], safetensors.FORMAT, metadata={},
                    durable=False)  # fmt: skip
    assert Path(plan.shard_path(1)).read_bytes() == b"someone else's"


# -- streaming ------------------------------------------------------------------------------------


def test_each_tensor_is_produced_once_and_dropped_before_the_next(tmp_path: Path) -> None:
    produced: list[str] = []
    alive: list[int] = []  # tensors held when each one is produced
    live = [0]

    def freed() -> None:
        live[0] -= 1

    def producer(name: str) -> Callable[[], np.ndarray]:
        def make() -> np.ndarray:
            produced.append(name)
            live[0] += 1
            alive.append(live[0])
            array = np.ones(250, np.float32)
            weakref.finalize(array, freed)
            return array

        return make

    names = [f"t{i}" for i in range(9)]
    entries = [TensorEntry(name, F32, (250,), producer(name)) for name in names]
    write_set(tmp_path, SAFETENSORS, safetensors.FORMAT, entries, max_shard_size=3 * KB,
              metadata={}, overwrite=True, durable=False)  # fmt: skip
    assert sorted(produced) == names  # once each
    assert max(alive) == 1  # never two tensors held at once


# Run in a child so its peak RSS is its own: a set of `total` bytes in shards of `shard`
# bytes, each tensor `tensor` bytes made on demand. Prints the peak RSS over the resident size
# before the save.
PEAK_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    from weightstore import safetensors
    from weightstore.dtypes import from_name
    from weightstore.entry import TensorEntry
    from weightstore.sets import layout_for, write_set

    def status(field):
        # This process's own resident and peak sizes (Linux). Not ru_maxrss: after fork and
        # exec it keeps the forking parent's peak, a whole test process with torch loaded.
        try:
            with open("/proc/self/status") as lines:
                for line in lines:
                    if line.startswith(field + ":"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    directory, total, shard, tensor = sys.argv[1], *map(int, sys.argv[2:])
    numel = tensor // 4
    entries = [
        TensorEntry(f"t{i}", from_name("F32"), (numel,), lambda i=i: np.full(numel, i, np.float32))
        for i in range(total // tensor)
    ]
    np.full(numel, 0, np.float32)  # numpy's own first-use allocations, before the baseline
    before = status("VmRSS")
    write_set(directory, layout_for("safetensors"), safetensors.FORMAT, entries,
              max_shard_size=shard, metadata={}, overwrite=False, durable=False)
    after = status("VmHWM")
    print(json.dumps({"growth": after - before, "peak": after}))
    """
)


def _peak_growth(directory: Path, total: int, shard: int, tensor: int) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PEAK_CHILD, str(directory), str(total), str(shard), str(tensor)],
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, int] = json.loads(done.stdout)
    return report


@pytest.mark.skipif(sys.platform == "win32", reason="resource.getrusage is POSIX")
def test_peak_memory_is_one_tensor_not_the_model(tmp_path: Path) -> None:
    total, shard, tensor = 128 * 2**20, 32 * 2**20, 8 * 2**20
    report = _peak_growth(tmp_path / "set", total, shard, tensor)
    assert len(os.listdir(tmp_path / "set")) == total // shard + 1
    # A tensor, plus a constant; the model is 16 tensors.
    assert report["growth"] < 2 * tensor + 8 * 2**20, report


@pytest.mark.slow  # writes 1 GiB: a few seconds
@pytest.mark.skipif(sys.platform == "win32", reason="resource.getrusage is POSIX")
def test_peak_memory_of_a_1_gib_set_in_64_mb_shards(tmp_path: Path) -> None:
    total, shard, tensor = 2**30, 64 * 10**6, 16 * 2**20
    report = _peak_growth(tmp_path / "set", total, shard, tensor)
    assert report["growth"] < 2 * tensor + 8 * 2**20, report
    print(f"1 GiB in 64 MB shards: peak RSS grew {report['growth'] / 2**20:.1f} MiB")


# -- the store options ----------------------------------------------------------------------------


def _model(seed: int) -> dict[str, Any]:
    arrays = _arrays(seed)
    return {"layers": {str(i): {"weight": arrays[f"layers.{i}.weight"]} for i in range(8)}}


def test_a_store_with_max_shard_size_saves_a_set_into_its_directory(tmp_path: Path) -> None:
    from weightstore import save_into

    store = SafetensorsStore.from_file(tmp_path / "ckpt").with_max_shard_size("3KB")
    assert store.options.max_shard_size == 3 * KB
    path = save_into(_model(0), store.with_metadata("run", "1"))
    assert path == str(tmp_path / "ckpt" / "model.safetensors.index.json")
    tensors, metadata = _read_set(tmp_path / "ckpt")
    _assert_same(tensors, _arrays(0))
    assert metadata["run"] == "1" and metadata["producer"] == "weightstore"
    with pytest.raises(DestinationExistsError):
        save_into(_model(1), store)
    save_into(_model(1), store.overwrite())
    _assert_same(_read_set(tmp_path / "ckpt")[0], _arrays(1))


@pytest.mark.parametrize("store_type", [SafetensorsStore, BurnpackStore])
def test_a_set_saved_by_a_store_loads_through_a_store(tmp_path: Path, store_type: Any) -> None:
    from weightstore import load_from, save_into

    save_into(_model(0), store_type.from_file(tmp_path).with_max_shard_size(3000))
    save_into(_model(1), store_type.from_file(tmp_path).with_max_shard_size(2000).overwrite())
    target = _model(2)
    result = load_from(target, store_type.from_file(tmp_path))
    assert len(result.applied) == 8
    loaded = {f"layers.{i}.weight": target["layers"][str(i)]["weight"] for i in range(8)}
    _assert_same(loaded, _arrays(1))


def test_a_store_on_an_existing_directory_saves_a_set_of_default_shard_size(
    tmp_path: Path,
) -> None:
    from weightstore import save_into

    store = SafetensorsStore.from_file(tmp_path / "ckpt")  # a directory by the time it saves
    (tmp_path / "ckpt").mkdir()
    path = save_into(_model(0), store)
    assert path == str(tmp_path / "ckpt" / "model.safetensors")  # 8 KB: one 5GB shard
    _assert_same(_read_set(tmp_path / "ckpt")[0], _arrays(0))


def test_a_burnpack_store_saves_a_set_without_the_extension_rule(tmp_path: Path) -> None:
    from weightstore import save_into

    path = save_into(
        _model(0), BurnpackStore.from_file(tmp_path / "ckpt").with_max_shard_size(3000)
    )
    assert path == str(tmp_path / "ckpt" / "model.bpk.index.json")
    assert not (tmp_path / "ckpt.bpk").exists()


def test_a_store_variant_names_the_set(tmp_path: Path) -> None:
    from weightstore import save_into

    store = (
        SafetensorsStore.from_file(tmp_path / "ckpt").with_max_shard_size(4000).with_variant("fp16")
    )
    path = save_into(_model(0), store)
    assert path == str(tmp_path / "ckpt" / "model.safetensors.index.fp16.json")
    _assert_same(_read_set(tmp_path / "ckpt", "fp16")[0], _arrays(0))


def test_a_variant_on_a_single_file_save_is_refused(tmp_path: Path) -> None:
    from weightstore import save_into

    store = SafetensorsStore.from_file(tmp_path / "m.safetensors").with_variant("fp16")
    with pytest.raises(InvalidOptionError) as caught:
        save_into(_model(0), store)
    assert caught.value.option == "variant"
    assert not (tmp_path / "m.safetensors").exists()


@pytest.mark.parametrize("bad", ["fp-16", "", "../x", 16])
def test_a_malformed_variant_is_refused_at_the_builder(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        SafetensorsStore.from_file(tmp_path / "ckpt").with_variant(bad)
    assert caught.value.option == "variant"


def test_a_bad_size_is_refused_at_the_builder(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        SafetensorsStore.from_file(tmp_path / "ckpt").with_max_shard_size("5Gb")
    assert caught.value.option == "max_shard_size"


def test_memory_stores_and_read_only_formats_refuse_sets(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="directory of files"):
        SafetensorsStore.from_bytes().with_max_shard_size("5GB")
    with pytest.raises(InvalidOptionError) as caught:
        PytorchStore.from_file(tmp_path / "ckpt").with_max_shard_size("5GB")
    assert caught.value.format == "pytorch"


@pytest.fixture
def torch_model() -> Iterator[Any]:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    yield torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_a_torch_model_saves_a_set_marked_pt_for_transformers(
    tmp_path: Path, torch_model: Any
) -> None:
    from weightstore import save_into

    save_into(torch_model, SafetensorsStore.from_file(tmp_path).with_max_shard_size(1000))
    tensors, metadata = _read_set(tmp_path)
    assert metadata["format"] == "pt"
    for name, value in torch_model.state_dict().items():
        np.testing.assert_array_equal(tensors[name], value.numpy())
    safe_open = need("safetensors").safe_open

    for shard in set(json.loads((tmp_path / "model.safetensors.index.json").read_text())[
        "weight_map"].values()):  # fmt: skip
        with safe_open(tmp_path / shard, "np") as file:
            assert file.metadata()["format"] == "pt"
