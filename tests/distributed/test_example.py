"""The two-process example of docs/distributed.md: the page shows `example_two_ranks.py` exactly
(the example's one copy), and the script runs as its readers would run it (slow: it starts
three processes; its `main` also runs in the default run, in test_process_groups.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._optional import need

EXAMPLE = Path(__file__).with_name("example_two_ranks.py")
PAGE = Path(__file__).resolve().parents[2] / "docs" / "distributed.md"
TIMEOUT_S = 240  # two ranks each import torch; a hung collective fails the test, not the run


def test_the_page_shows_the_example_that_runs() -> None:
    """Needs no torch: the page is in the repository, so a missing page fails."""
    assert EXAMPLE.read_text(encoding="utf-8") in PAGE.read_text(encoding="utf-8")


@pytest.mark.slow
def test_two_processes_save_a_set_and_load_their_slices_back(tmp_path: Path) -> None:
    need("torch.distributed")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))
    assert lines == [
        "rank 0: model.safetensors.index.json, 4 loaded, same: True",
        "rank 1: model.safetensors.index.json, 4 loaded, same: True",
    ]
    index = tmp_path / "tp-checkpoint" / "model.safetensors.index.json"
    assert index.exists() and len(list(index.parent.glob("model-0000?-of-00002.safetensors"))) == 2
