"""Old set or new set, never a mix: saves over a set killed with SIGKILL at random instants.

A child process saves into one directory again and again, alternating two models whose every
tensor differs (A and B) through a cycle of layouts that covers a change of shard count, a
save with the same count (so the plain names are taken), sharded over unsharded and back. The
parent kills it at a random instant, then checks the directory: it must load as exactly the
last save the child finished or the one after it, all of one model, with the layout that save
asked for. The next child starts over whatever the kill left, so leftovers of killed saves meet
the next save. Loading is checked three ways: by hand from the index (every shard's set id
against the index's, every value against the model), with huggingface_hub's
`load_torch_model`, and through weightstore's set reader where there is one.

Children are forks of the run's fork server (`tests._forkserver`, this module preloaded), not
of the test process: by the time this runs another test may have imported JAX, whose threads
make a fork of the test process unsafe (JAX warns on each). A fork of the single-threaded
server has everything imported too, so a kill still costs milliseconds.
`test_the_checker_sees_the_mix_a_naive_writer_leaves` shows the check can fail: a writer that
rewrites shards in place under the plain names leaves a mix that it reports.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import random
import signal
import sys
import time
import warnings
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._forkserver import context as forkserver_context
from tests._optional import need
from weightstore import safetensors
from weightstore.entry import TensorEntry
from weightstore.sets import SET_ID_KEY, layout_for, write_set

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or sys.platform == "win32", reason="SIGKILL of forked savers is POSIX"
)
READY = b""  # the saver's first message: started, about to save

LAYOUT = layout_for("safetensors")
INDEX = LAYOUT.index_name()
SINGLE = LAYOUT.single_name()
ROWS, COLUMNS, TENSORS = 16, 1024, 12  # 12 tensors of 64 KiB: a save is a few milliseconds
TENSOR_SIZE = ROWS * COLUMNS * 4
# Bytes per shard giving each shard count: 1 (everything), 2, 3 and 4 shards of 12 tensors.
SHARD_SIZE = {1: 10**9, 2: 6 * TENSOR_SIZE, 3: 4 * TENSOR_SIZE, 4: 3 * TENSOR_SIZE}
# Save number n writes CYCLE[n % 6]: models alternate; the counts go 3 -> 2 (fewer),
# 2 -> 1 (sharded to unsharded), 1 -> 1, 1 -> 4 (unsharded to sharded), 4 -> 4 (the plain
# names are taken), 4 -> 3.
CYCLE = [("A", 3), ("B", 2), ("A", 1), ("B", 1), ("A", 4), ("B", 4)]
MODELS = {
    name: {
        f"layers.{i}.weight": np.random.default_rng([seed, i]).standard_normal((ROWS, COLUMNS))
        .astype(np.float32)
        for i in range(TENSORS)
    }
    for name, seed in (("A", 1), ("B", 2))
}  # fmt: skip
MAX_KILL_DELAY = 0.025  # seconds after the saver is ready: spans several saves


class MixedError(AssertionError):
    """The directory loads as neither whole model: what the commit protocol must prevent."""


# -- the saver ------------------------------------------------------------------------------------


def _save(directory: Path, number: int, durable: bool) -> None:
    model, count = CYCLE[number % len(CYCLE)]
    entries = [TensorEntry.from_array(name, array) for name, array in MODELS[model].items()]
    metadata = {"format": "pt", "save": str(number)}  # "pt": huggingface_hub's loader checks
    write_set(directory, LAYOUT, safetensors.FORMAT, entries, max_shard_size=SHARD_SIZE[count],
              metadata=metadata, overwrite=True, durable=durable)  # fmt: skip


def _saver(directory: Path, first: int, report: Connection, durable: bool, named: bool) -> None:
    """The child: send `READY`, then save `first`, `first + 1`, ... until killed, sending each
    number once its save returned (one write of 12 bytes: a kill never splits it). Never
    returns."""
    try:
        if named:  # hold bytes in named scratch files, as on a filesystem without O_TMPFILE
            _refuse_tmpfile()
        report.send_bytes(READY)
        number = first
        while True:
            _save(directory, number, durable)
            report.send_bytes(number.to_bytes(8, "little"))
            number += 1
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(2)


def _refuse_tmpfile() -> None:
    plain_open, tmpfile = os.open, getattr(os, "O_TMPFILE", -1)

    def no_tmpfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & tmpfile == tmpfile:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported", path)
        return plain_open(path, flags, *args, **kwargs)

    os.open = no_tmpfile  # type: ignore[assignment]


def _kill_a_saver(
    directory: Path, first: int, delay: float, durable: bool, named: bool
) -> int | None:
    """Start a saver, SIGKILL it `delay` seconds after it is ready; the last save it
    finished, or None."""
    context = forkserver_context()
    reader, writer = context.Pipe(duplex=False)
    saver = context.Process(target=_saver, args=(directory, first, writer, durable, named))
    saver.start()
    writer.close()  # the child's copy is the only one: its death ends the pipe
    try:
        assert reader.poll(60) and reader.recv_bytes() == READY, "the saver did not start"
        time.sleep(delay)
    finally:
        saver.kill()
        saver.join()
    finished = None
    with reader:
        while True:
            try:
                finished = int.from_bytes(reader.recv_bytes(), "little")
            except EOFError:
                break
    assert saver.exitcode == -signal.SIGKILL, f"the saver failed (exit {saver.exitcode})"
    return finished


# -- the checks -----------------------------------------------------------------------------------


def _which_model(tensors: dict[str, np.ndarray]) -> str:
    for name, model in MODELS.items():
        if tensors.keys() == model.keys() and all(
            np.array_equal(tensors[key], value) for key, value in model.items()
        ):
            return name
    from_a = sum(np.array_equal(v, MODELS["A"].get(k)) for k, v in tensors.items())
    raise MixedError(f"{len(tensors)} tensors, {from_a} of A's: neither model whole")


def loaded_save(directory: Path) -> int:
    """The number of the save the directory holds, read by hand as a set reader must: the
    index when there is one, else the single file; every shard's set id checked against the
    index's (when it has one); every tensor compared with the models. Raises `MixedError`."""
    safe_open = need("safetensors").safe_open  # the package as the independent reader

    if not (directory / INDEX).exists():
        with safe_open(directory / SINGLE, "np") as file:
            tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118
            number, count = int(file.metadata()["save"]), 1
    else:
        index = json.loads((directory / INDEX).read_text())
        metadata, weight_map = index["metadata"], index["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            with safe_open(directory / shard, "np") as file:
                if SET_ID_KEY in metadata and file.metadata()[SET_ID_KEY] != metadata[SET_ID_KEY]:
                    raise MixedError(f"{shard} belongs to another save than the index")
                for name in (n for n, s in weight_map.items() if s == shard):
                    tensors[name] = file.get_tensor(name)
        number, count = int(metadata["save"]), len(set(weight_map.values()))
    model = _which_model(tensors)
    assert (model, count) == CYCLE[number % len(CYCLE)], f"save {number}: {model}, {count}"
    return number


def _hf_model(directory: Path) -> str | None:
    """The model huggingface_hub's loader finds, or None when it refuses the directory (no
    index, and more than one ``*.safetensors`` file: the single file beside stray shards)."""
    import torch
    from huggingface_hub import load_torch_model

    module = torch.nn.Module()
    module.layers = torch.nn.ModuleList(
        torch.nn.Linear(COLUMNS, ROWS, bias=False) for _ in range(TENSORS)
    )
    try:
        load_torch_model(module, directory, strict=True)
    except ValueError as err:
        assert "does not contain a valid checkpoint" in str(err), err
        assert not (directory / INDEX).exists()
        return None
    return _which_model({k: v.numpy() for k, v in module.state_dict().items()})


def _hf_available() -> bool:
    return all(importlib.util.find_spec(name) for name in ("torch", "huggingface_hub"))


def _weightstore_model(directory: Path) -> str | None:
    """The model weightstore's set reader finds, or None when there is no set reader yet."""
    import weightstore.sets

    open_set = getattr(weightstore.sets, "open_set", None)
    if open_set is None:
        return None
    with warnings.catch_warnings():  # it reports leftovers of killed saves, as it should
        warnings.simplefilter("ignore")
        with open_set(str(directory)) as reader:
            return _which_model({name: np.asarray(reader.get(name)) for name in reader.names()})


# -- the runs -------------------------------------------------------------------------------------


def _kill_many(directory: Path, kills: int, seed: int, named: bool) -> Counter[str]:
    """Kill `kills` savers over one directory; tally what each kill left."""
    rng = random.Random(seed)
    _save(directory, 0, durable=False)
    on_disk = 0
    tally: Counter[str] = Counter()
    for _ in range(kills):
        durable = rng.random() < 0.25
        finished = _kill_a_saver(directory, on_disk + 1, rng.uniform(0, MAX_KILL_DELAY), durable,
                                 named)  # fmt: skip
        last = on_disk if finished is None else finished
        tally["saves finished"] += last - on_disk
        found = loaded_save(directory)
        assert found in (last, last + 1), f"holds save {found}, the saver finished {last}"
        tally["old" if found == last else "new"] += 1
        model = CYCLE[found % len(CYCLE)][0]
        if _hf_available():  # the check by hand runs without it
            hf = _hf_model(directory)
            tally["hf refused" if hf is None else "hf loaded"] += 1
            assert hf in (None, model)
        ours = _weightstore_model(directory)
        assert ours in (None, model)
        tally["weightstore loaded" if ours is not None else "no weightstore reader"] += 1
        leftovers = set(os.listdir(directory)) - _set_files(directory)
        tally["leftovers" if leftovers else "clean"] += 1
        on_disk = found
    _save(directory, on_disk + 1, durable=True)  # a save removes every leftover
    assert set(os.listdir(directory)) == _set_files(directory)
    assert loaded_save(directory) == on_disk + 1
    return tally


def _set_files(directory: Path) -> set[str]:
    if not (directory / INDEX).exists():
        return {SINGLE}
    weight_map = json.loads((directory / INDEX).read_text())["weight_map"]
    return {INDEX, *weight_map.values()}


def test_savers_are_not_forks_of_the_test_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork of the test process after another test imported JAX risks a deadlock (and made
    JAX warn 20 times a run): savers come from the fork server."""

    def no_fork() -> int:
        raise AssertionError("os.fork() of the test process")

    monkeypatch.setattr(os, "fork", no_fork)
    _save(tmp_path, 0, durable=False)
    finished = _kill_a_saver(tmp_path, 1, 0.005, durable=False, named=False)
    assert loaded_save(tmp_path) in (0 if finished is None else finished, (finished or 0) + 1)


@pytest.mark.parametrize("named", [False, True], ids=["anonymous-scratch", "named-scratch"])
def test_killed_saves_leave_the_old_set_or_the_new(tmp_path: Path, named: bool) -> None:
    tally = _kill_many(tmp_path, kills=10, seed=1 + named, named=named)
    assert tally["old"] + tally["new"] == 10


@pytest.mark.slow  # 500 kills: about a minute
@pytest.mark.parametrize("named", [False, True], ids=["anonymous-scratch", "named-scratch"])
def test_many_killed_saves_leave_the_old_set_or_the_new(tmp_path: Path, named: bool) -> None:
    kills = 250
    tally = _kill_many(tmp_path, kills=kills, seed=100 + named, named=named)
    print(f"\n{'named' if named else 'anonymous'} scratch, {kills} kills: {dict(tally)}")
    assert tally["old"] + tally["new"] == kills
    assert tally["old"] and tally["new"]  # the kills did land on both sides of commits
    assert tally["leftovers"]  # ... and inside saves


# -- the checker can fail -------------------------------------------------------------------------


def _naive_save(directory: Path, number: int, shards_before_crash: int | None = None) -> None:
    """How a writer without a commit protocol re-saves: shards rewritten in place under the
    plain names, the index written last; `shards_before_crash` stops it part way."""
    save_file = need("safetensors.numpy").save_file

    model, count = CYCLE[number % len(CYCLE)]
    names = list(MODELS[model])
    per_shard = -(-len(names) // count)
    weight_map = {}
    for n in range(count):
        if shards_before_crash is not None and n == shards_before_crash:
            return  # killed
        shard = LAYOUT.shard_name(n + 1, count)
        group = names[n * per_shard : (n + 1) * per_shard]
        save_file(
            {k: MODELS[model][k] for k in group},
            directory / shard,
            {"format": "pt", "save": str(number)},
        )
        weight_map.update(dict.fromkeys(group, shard))
    index = {"metadata": {"save": str(number)}, "weight_map": weight_map}
    (directory / INDEX).write_text(json.dumps(index))


def test_the_checker_sees_the_mix_a_naive_writer_leaves(tmp_path: Path) -> None:
    _naive_save(tmp_path, 4)  # A in 4 shards
    assert loaded_save(tmp_path) == 4
    _naive_save(tmp_path, 5, shards_before_crash=2)  # B in 4 shards, killed after two
    with pytest.raises(MixedError, match="neither model whole"):
        loaded_save(tmp_path)
    if _hf_available():  # its loader takes the mix silently
        assert _hf_model_or_mix(tmp_path) == "mix"


def _hf_model_or_mix(directory: Path) -> str | None:
    try:
        return _hf_model(directory)
    except MixedError:
        return "mix"


def test_the_set_id_check_sees_a_shard_of_another_save(tmp_path: Path) -> None:
    _save(tmp_path, 4, durable=False)  # A in 4 shards
    shard = sorted(set(json.loads((tmp_path / INDEX).read_text())["weight_map"].values()))[0]
    other = tmp_path / "other"
    _save(other, 4, durable=False)  # the same tensors, another save
    other_shard = sorted(set(json.loads((other / INDEX).read_text())["weight_map"].values()))[0]
    os.replace(other / other_shard, tmp_path / shard)  # every value still A's
    with pytest.raises(MixedError, match="another save"):
        loaded_save(tmp_path)
