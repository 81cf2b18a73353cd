"""Progress on stderr for long jobs: bytes done, rate and time left, through tqdm.

A bar appears only when it helps: stderr is a terminal, ``--quiet`` was not given, and the job
has run for about a second (`DEFAULT_DELAY`), so quick jobs and pipes print nothing. tqdm is
imported here, inside `Progress`, and only when a bar may be drawn: ``import weightstore`` and
the commands that never show one do not load it.

The environment variable ``WEIGHTSTORE_PROGRESS_DELAY`` (seconds, default 1) sets how long a job
runs before its bar appears; the tests set it to 0 to see a bar on a small file.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any, Final

from weightstore.cli._text import shortened

__all__ = ["DEFAULT_DELAY", "DELAY_VARIABLE", "Progress"]

DEFAULT_DELAY: Final = 1.0
"""Seconds a job runs before its bar appears."""
DELAY_VARIABLE: Final = "WEIGHTSTORE_PROGRESS_DELAY"
"""The environment variable that overrides `DEFAULT_DELAY` (seconds; the tests set 0)."""
_DESCRIPTION_LEN: Final = 40  # characters of the file name shown before the bar


def _delay() -> float:
    try:
        delay = float(os.environ.get(DELAY_VARIABLE, DEFAULT_DELAY))
    except ValueError:
        return DEFAULT_DELAY  # a typo in a tuning variable is not worth failing a job for
    return max(delay, 0.0)


class Progress:
    """A byte counter drawn as a bar on stderr, or nothing; use as a context manager.

    Args:
        total: bytes the job will process.
        description: what is being processed (a file name), shown before the bar.
        quiet: never draw (``--quiet``).

    Example:
        >>> with Progress(total, "model.bpk", quiet=False) as progress:  # doctest: +SKIP
        ...     progress.advance(tensor_nbytes)
    """

    def __init__(self, total: int, description: str, *, quiet: bool) -> None:
        self._bar: Any = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm  # lazily: only a terminal ever needs it

            self._bar = tqdm(
                total=total,
                desc=shortened(description, _DESCRIPTION_LEN),
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                delay=_delay(),
                leave=False,
                dynamic_ncols=True,
                file=sys.stderr,
            )

    @property
    def shown(self) -> bool:
        """Whether a bar may be drawn (a terminal, not quiet)."""
        return self._bar is not None

    def advance(self, nbytes: int) -> None:
        """Count `nbytes` more as done."""
        if self._bar is not None:
            self._bar.update(nbytes)

    def close(self) -> None:
        """Remove the bar; further `advance` calls do nothing."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
