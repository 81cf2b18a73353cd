"""Old set or new set, never a mix, for rank-aware saves killed at random instants.

A child process saves version k of a model over version k - 1 with three ranks (threads of
`_threads.ThreadRanks`, so one SIGKILL stops every rank at once, mid-write or mid-commit) and
is killed at a random instant of the save. The directory must then load as the whole of
version k - 1 or the whole of version k. Versions change the shard count, and the first one
is the single unsharded file a one-rank save writes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import SafetensorsStore

ROOT = Path(__file__).resolve().parents[2]
TENSORS, ROWS = 12, 65_536  # float32 rows of 4 values: 12 tensors of 1 MiB, 12 MiB a version
TRIALS = 40

CHILD = """
import sys
sys.path.insert(0, {root!r})
from tests.distributed.test_kill import save_version
save_version({directory!r}, {version})
"""


def model_version(version: int) -> dict[str, np.ndarray[Any, Any]]:
    """Version `version` of the model: every value says which version it belongs to."""
    return {f"t{i:02d}": np.full((ROWS, 4), version * 100 + i, np.float32) for i in range(TENSORS)}


def save_version(directory: str, version: int) -> None:
    """Save `version` with three ranks (one for version 0: a single file); shard sizes change
    with the version, so consecutive sets have different shard counts."""
    from tests.distributed._threads import ThreadRanks
    from weightstore.distributed import save

    world_size = 1 if version == 0 else 3
    store = SafetensorsStore.from_file(directory).overwrite()
    if version:
        store = store.with_max_shard_size((version % 3 + 1) * 2**21)
    model = model_version(version)
    print("saving", flush=True)
    started = time.monotonic()
    outcomes = ThreadRanks(world_size).run(lambda rank, group: save(store, model, group=group))
    assert all(ok for ok, _ in outcomes), outcomes
    print(f"saved in {time.monotonic() - started:.6f} s", flush=True)


def _loaded_version(directory: Path) -> int:
    """The version the directory loads as, checking that every tensor agrees."""
    model = {name: np.zeros_like(a) for name, a in model_version(0).items()}
    SafetensorsStore.from_file(directory).apply_to(model)
    versions = {int(array[0, 0]) // 100 for array in model.values()}
    assert len(versions) == 1, f"a mix of versions {sorted(versions)}"
    (version,) = versions
    for name, array in model.items():
        assert np.array_equal(array, model_version(version)[name]), name
    return version


def _run_child(directory: Path, version: int, kill_after: float | None) -> float | None:
    """Save `version` in a child, SIGKILLed `kill_after` seconds into the save (None: let it
    finish); the seconds the save took, or None when it was killed first."""
    code = CHILD.format(root=str(ROOT), directory=str(directory), version=version)
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "saving", child.stderr.read() if child.stderr else ""
    if kill_after is not None:
        time.sleep(kill_after)
        os.kill(child.pid, signal.SIGKILL)
    out, err = child.communicate(timeout=120)
    if kill_after is None:
        assert child.returncode == 0, err
    done = [line for line in out.splitlines() if line.startswith("saved in ")]
    return float(done[0].split()[2]) if done else None


@pytest.mark.slow
def test_killed_rank_aware_saves_leave_the_old_set_or_the_new_one(tmp_path: Path) -> None:
    directory = tmp_path / "set"
    _run_child(directory, 0, None)
    save_time = _run_child(directory, 1, None)
    assert save_time is not None and _loaded_version(directory) == 1
    rng = random.Random(13)
    current, outcomes = 1, {"old": 0, "new": 0, "finished": 0}
    for _ in range(TRIALS):
        version = current + 1
        finished = _run_child(directory, version, rng.uniform(0, save_time * 1.2)) is not None
        loaded = _loaded_version(directory)
        assert loaded in (current, version), (loaded, current, version)
        if finished:
            outcomes["finished"] += 1
            assert loaded == version
        outcomes["new" if loaded == version else "old"] += 1
        current = loaded
    print(f"{TRIALS} kills: {outcomes}")
    assert outcomes["old"] >= TRIALS // 4  # most kills land inside a save
