"""Running a function on every rank of a real process group (gloo on the CPU, 127.0.0.1, a
free port): the one harness of the torch.distributed tests (tests/distributed, tests/dcp).

Ranks start from a fork server that has imported torch and the tests' worker modules once
(`tests._forkserver.PRELOAD`), so a group of ranks costs a fork each rather than a fresh
interpreter importing torch: the kill tests start a group per trial. The fork server's children
take the parent's working directory and ``sys.path`` at each start, but not later changes to
``os.environ``: pass what a rank needs as arguments. `run_ranks` fails the test on any rank's
exception, with its traceback, and on ranks still running at the deadline (a hung collective is
a failure, never a hung run); `run_until_killed` expects a rank to die by SIGKILL and stops the
others.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any, Final

import pytest

from tests._forkserver import START_METHOD, preload
from tests._optional import need

torch = need("torch")
dist = need("torch.distributed")
mp = need("torch.multiprocessing")

if not dist.is_available():  # pragma: no cover - the CPU wheel has it
    pytest.skip("torch.distributed is not available", allow_module_level=True)

DEADLINE_S: Final = 240.0  # seconds for one group's run (four ranks on a busy machine)
GROUP_TIMEOUT: Final = datetime.timedelta(seconds=120)  # a collective waiting longer has failed


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _start(worker: Callable[..., None], world_size: int, args: tuple[Any, ...]) -> Any:
    return _processes(_entry, (worker, world_size, free_port(), args), world_size)


def _processes(function: Callable[..., None], args: tuple[Any, ...], count: int) -> Any:
    preload()  # before the fork server starts; later calls reuse it (tests/_forkserver.py)
    return mp.start_processes(
        function, args=args, nprocs=count, join=False, start_method=START_METHOD
    )


def run_main(main: Callable[..., None], world_size: int) -> None:
    """Run ``main(rank, world_size, port)``, which joins its own group (as an example's
    does), on `world_size` ranks; failures as for `run_ranks`."""
    context = _processes(main, (world_size, free_port()), world_size)
    _join(context, world_size)


def run_ranks(worker: Callable[..., None], world_size: int, *args: Any) -> None:
    """Run ``worker(rank, world_size, *args)`` in `world_size` processes of one gloo group."""
    _join(_start(worker, world_size, args), world_size)


def _join(context: Any, world_size: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not context.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"{world_size} ranks did not finish within {DEADLINE_S:.0f} s")


def run_until_killed(worker: Callable[..., None], world_size: int, *args: Any) -> bool:
    """Run `worker` as `run_ranks` does, when it is meant to SIGKILL one of its ranks: the
    others (waiting in a collective for the dead one) are killed too. True when a rank died
    by SIGKILL, False when every rank finished."""
    context = _start(worker, world_size, args)
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not context.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                pytest.fail(f"{world_size} ranks did not finish within {DEADLINE_S:.0f} s")
    except mp.ProcessExitedException as exited:
        if exited.exit_code != -signal.SIGKILL:
            raise
        return True
    except mp.ProcessRaisedException:
        raise
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join()
    return False


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
