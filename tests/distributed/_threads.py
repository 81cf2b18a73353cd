"""Ranks as threads: a `weightstore.distributed._save.Group` without processes, for testing
the save's agreement and ordering rules quickly and deterministically.

Each collective is a barrier with a timeout, so a rank that skips one, or runs another, breaks
the barrier and fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

TIMEOUT_S = 30.0  # a thread waiting this long at a barrier has lost its peers


class ThreadRanks:
    """`world_size` ranks that share memory; `group(rank)` is one rank's `Group`."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._barrier = threading.Barrier(world_size, timeout=TIMEOUT_S)
        self._slots: list[object] = [None] * world_size
        self.steps: list[list[str]] = [[] for _ in range(world_size)]  # collectives, by rank

    def group(self, rank: int) -> RankGroup:
        return RankGroup(self, rank)

    def exchange(self, rank: int, value: object) -> list[object]:
        """Every rank's `value`, once all have posted theirs."""
        self._slots[rank] = value
        self._barrier.wait()
        values = list(self._slots)
        self._barrier.wait()  # nobody posts the next value before everyone has read this one
        return values

    def run(self, work: Callable[[int, RankGroup], Any]) -> list[tuple[bool, Any]]:
        """``work(rank, group)`` on every rank at once: each rank's result or exception."""
        outcomes: list[tuple[bool, Any]] = [(False, None)] * self.world_size

        def one(rank: int) -> None:
            try:
                outcomes[rank] = (True, work(rank, self.group(rank)))
            except BaseException as err:  # reported to the test, never lost in the thread
                outcomes[rank] = (False, err)  # peers left waiting time out at the barrier

        threads = [threading.Thread(target=one, args=(r,)) for r in range(self.world_size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT_S * 4)
        assert not any(thread.is_alive() for thread in threads), "a rank hung"
        return outcomes


class RankGroup:
    """One rank's view of `ThreadRanks`, shaped as the save's `Group`."""

    def __init__(self, ranks: ThreadRanks, rank: int) -> None:
        self._ranks, self.rank, self.world_size = ranks, rank, ranks.world_size

    def broadcast(self, value: object, source: int = 0) -> object:
        return self._ranks.exchange(self.rank, value if self.rank == source else None)[source]

    def all_gather(self, value: object) -> list[object]:
        return self._ranks.exchange(self.rank, value)

    def collective(self, name: str) -> None:
        """A stand-in for a gather of tensor `name`: every rank must run it at the same step."""
        self._ranks.steps[self.rank].append(name)
        names = self._ranks.exchange(self.rank, name)
        assert len(set(names)) == 1, f"ranks ran different collectives at one step: {names}"
