"""Running a function on every rank of a real process group (gloo, on the CPU).

`run_ranks` spawns one process per rank (``torch.multiprocessing`` with the spawn method),
joins a gloo group on 127.0.0.1 at a free port, runs the worker and fails the test on any
rank's exception, with its traceback, or when the ranks do not finish in time (a hung
collective is a failure, never a hung test run).
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")

if not dist.is_available():  # pragma: no cover - the CPU wheel has it
    pytest.skip("torch.distributed is not available", allow_module_level=True)

DEADLINE_S = 240.0  # seconds for a whole run; spawning imports torch once per rank
GROUP_TIMEOUT = datetime.timedelta(seconds=120)  # a collective waiting longer has failed


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_ranks(worker: Callable[..., None], world_size: int, *args: Any) -> None:
    """Run ``worker(rank, world_size, *args)`` in `world_size` processes of one gloo group."""
    port = free_port()
    context = mp.start_processes(
        _entry, args=(worker, world_size, port, args), nprocs=world_size, join=False,
        start_method="spawn",
    )  # fmt: skip
    deadline = time.monotonic() + DEADLINE_S
    while not context.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"{world_size} ranks did not finish within {DEADLINE_S:.0f} s")


def _entry(rank: int, worker: Callable[..., None], world_size: int, port: int, args: Any) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the loopback interface only
    torch.set_num_threads(1)  # ranks share the machine's cores
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=GROUP_TIMEOUT)
    try:
        worker(rank, world_size, *args)
    finally:
        if dist.is_initialized():  # a worker may have ended it to start another group
            dist.destroy_process_group()
