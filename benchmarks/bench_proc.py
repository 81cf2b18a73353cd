"""Running a benchmark's child process and reading its peak memory; standard library only, so
a script measuring memory can import it without growing its own (a parent's high-water mark
carries into the children it spawns)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence

__all__ = ["run_with_peak_rss"]


def run_with_peak_rss(
    argv: Sequence[str], *, label: str, cwd: str | None = None, env: dict[str, str] | None = None
) -> tuple[float, int]:
    """Run `argv` to completion: its wall seconds and peak RSS in bytes (`ru_maxrss` from
    `wait4`, which counts the mapped file pages the process kept resident)."""
    started = time.perf_counter()
    child = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, env=env
    )
    assert child.stderr is not None
    stderr = child.stderr.read()  # until the child closes it, at exit
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
    child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"{label}: exit {child.returncode}\n{stderr[-4000:]!r}")
    return wall, usage.ru_maxrss * 1024  # KiB on Linux
