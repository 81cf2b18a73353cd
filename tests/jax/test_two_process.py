"""Two processes load one file split by rows: each reads only its own rows.

A real multi-process JAX run: `jax.distributed.initialize` on 127.0.0.1 with gloo CPU
collectives, one CPU device per process, `_two_process.py` as each process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from weightstore import BurnpackStore, save_into

WORKER = Path(__file__).with_name("_two_process.py")
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_each_process_reads_only_its_rows(tmp_path: Path) -> None:
    weight = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    save_into({"w": weight, "b": np.zeros(32, np.float32)}, BurnpackStore.from_file(tmp_path / "m"))
    port = str(_free_port())
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT / "src")}
    env.pop("XLA_FLAGS", None)
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), port, str(rank), str(tmp_path / "m.bpk")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in range(2)
    ]
    reports = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=120)
        finally:
            process.kill()
        assert process.returncode == 0, err[-2000:]
        reports.append(json.loads(out.splitlines()[-1]))
    reports.sort(key=lambda report: report["process"])
    assert [report["rows"] for report in reports] == [[0, 32], [32, 64]]
    for report in reports:
        assert report["success"] and report["equal"] and report["global"] == 2
        # Its own 32 rows in one read, the replicated bias whole: nothing of the other half.
        assert sorted(map(tuple, report["reads"])) == [("b", 128), ("w", weight.nbytes // 2)]
