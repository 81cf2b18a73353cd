"""Old checkpoint or new, never a mix: a rank SIGKILLed in the middle of a save over a
committed checkpoint.

Version 0 is committed by one process; two ranks then save version 1 over it (Shard(0)), and
one rank kills itself: when the writer asks it for its first or second chunk (its file half
written), just before the coordinator commits, or just after (before the old files are
removed). The others die with the group. The directory must then load, bit-exactly, as
version 0 (killed before the commit) or version 1 (after), and a later save over it must
succeed and leave nothing of the killed one behind.
"""

from __future__ import annotations

import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from tests._ranks import run_until_killed  # noqa: E402  (needs torch)
from tests.dcp._workers import (  # noqa: E402
    blank_values,
    full_tensors,
    overwrite,
    plain_values,
    state,
)
from weightstore.dcp import BurnpackStorageReader, BurnpackStorageWriter  # noqa: E402

TRIALS = 20
KILL_POINTS = [(1, "chunk-1"), (0, "chunk-2"), (1, "chunk-2"), (0, "chunk-1"), (0, "before-commit")]


def _save_alone(directory: Path, version: int) -> None:
    """Commit `version` from this process alone (no process group)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # DCP: "assuming ... a single process"
        dcp.save(
            state(full_tensors(version), plain_values(version), lambda name, tensor: tensor),
            storage_writer=BurnpackStorageWriter(directory, overwrite=True),
            no_dist=True,
        )


def _loaded_version(directory: Path) -> int:
    """The version the directory loads as, every tensor and value checked bit-exactly."""
    zeros = {name: torch.zeros_like(t) for name, t in full_tensors().items()}
    target: dict[str, Any] = state(zeros, blank_values(), lambda name, tensor: tensor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(target, storage_reader=BurnpackStorageReader(directory), no_dist=True)
    version = int(target["epoch"]) - 3
    for name, tensor in full_tensors(version).items():
        assert torch.equal(target["model"][name], tensor), (name, version)
    assert target["sched"] == plain_values(version)["sched"]
    return version


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding version 0, committed; each trial works on a copy."""
    directory = tmp_path_factory.mktemp("committed") / "ckpt"
    _save_alone(directory, 0)
    return directory


def _trial(committed: Path, directory: Path, kill_rank: int, when: str) -> None:
    shutil.copytree(committed, directory)
    assert run_until_killed(overwrite, 2, str(directory), kill_rank, when), "no rank was killed"
    expected = 1 if when == "after-commit" else 0
    assert _loaded_version(directory) == expected, when
    _save_alone(directory, 2)  # the next save removes what the killed one left
    assert _loaded_version(directory) == 2
    assert len([p for p in directory.iterdir() if p.name.startswith("rank-")]) == 1, sorted(
        p.name for p in directory.iterdir()
    )
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("kill_rank", "when"), [(1, "chunk-2"), (0, "before-commit"), (0, "after-commit")]
)
def test_killed_rank_leaves_a_checkpoint_that_loads_whole(
    committed: Path, tmp_path: Path, kill_rank: int, when: str
) -> None:
    _trial(committed, tmp_path / "ckpt", kill_rank, when)


@pytest.mark.slow
def test_twenty_kills_mid_overwrite_leave_the_old_checkpoint(
    committed: Path, tmp_path: Path
) -> None:
    chooser = random.Random(16)
    for trial in range(TRIALS):
        kill_rank, when = chooser.choice(KILL_POINTS)
        _trial(committed, tmp_path / f"ckpt-{trial}", kill_rank, when)
