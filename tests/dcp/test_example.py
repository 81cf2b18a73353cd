"""The two-process example of docs/dcp.md: the page shows `example_reshard.py` exactly
(the example's one copy), its `main` runs on two ranks in the default run, and the script runs
as its readers would run it in the slow run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests._optional import need
from weightstore.dcp import open_dcp

EXAMPLE = Path(__file__).with_name("example_reshard.py")
PAGE = Path(__file__).resolve().parents[2] / "docs" / "dcp.md"
TIMEOUT_S = 240  # two ranks each import torch; a hung collective fails the test, not the run


def test_the_page_shows_the_example_that_runs() -> None:
    """Needs no torch: the page is in the repository, so a missing page fails."""
    assert EXAMPLE.read_text(encoding="utf-8") in PAGE.read_text(encoding="utf-8")


def test_the_example_saves_rows_and_loads_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("torch.distributed")
    from tests._ranks import run_main
    from tests.dcp.example_reshard import main

    monkeypatch.chdir(tmp_path)  # the ranks start here and write ./dcp-checkpoint
    run_main(main, 2)
    names = sorted(os.listdir(tmp_path / "dcp-checkpoint"))
    assert names[0] == "dcp.index.json" and len(names) == 3, names
    with open_dcp(str(tmp_path / "dcp-checkpoint")) as reader:
        expected = np.arange(48, dtype=np.float32).reshape(8, 6)
        assert np.array_equal(reader.get("model.weight"), expected)
        assert reader.values() == {"step": 100}


@pytest.mark.slow
def test_the_script_runs_as_shown(tmp_path: Path) -> None:
    need("torch.distributed")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = sorted(re.findall(r"rank \d: .*?same: (?:True|False)", done.stdout))  # interleaved
    assert lines == [
        "rank 0: columns (8, 3), step 100, same: True",
        "rank 1: columns (8, 3), step 100, same: True",
    ]
