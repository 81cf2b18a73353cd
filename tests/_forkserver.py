"""The one fork server of a test run: child processes start as forks of a clean,
single-threaded server rather than of the test process.

Forking the test process itself is unsafe once a test has imported JAX (its threads keep
running, and JAX warns on every ``os.fork``), and a fresh interpreter per child costs imports.
multiprocessing keeps one fork server per process, started by the first child of the run, with
the modules named by the first `set_forkserver_preload` before it: `PRELOAD` is the union of
what every user needs, so whichever starts it, each child is a fork with those imported. A name
that does not import (torch in a NumPy-only venv) is skipped by the server.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext
from typing import Final

PRELOAD: Final = [
    "torch", "torch.distributed.checkpoint", "tests.dcp._workers", "tests.dcp.example_reshard",
    "tests.distributed._workers", "tests.distributed.example_two_ranks",
    "tests.sets.test_commit_kill",
]  # fmt: skip
START_METHOD: Final = "forkserver"

_preloaded: list[bool] = [False]


def preload() -> None:
    """Name `PRELOAD` for the server; only the first call before it starts has any effect."""
    if not _preloaded[0]:
        multiprocessing.set_forkserver_preload(PRELOAD)
        _preloaded[0] = True


def context() -> BaseContext:
    """The fork server's multiprocessing context, `PRELOAD` named."""
    preload()
    return multiprocessing.get_context(START_METHOD)
