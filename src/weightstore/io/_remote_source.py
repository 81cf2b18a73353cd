"""A remote object as a byte source: a speculative first range at open, planned range reads.

`RemoteSource` is the `ByteSource` behind every URL, so burnpack, SafeTensors, PyTorch zips and
sharded sets read remote objects through the same code, and the same validation, as local
files. Requests go through `weightstore.io._fs` (the one module that imports fsspec).

Opening costs one request: the object's first `ReadTuning.head_size` bytes (64 KiB) and, from
the same response, its size. Those bytes are kept (the "head"), so a header that fits in them
is parsed without another request; a longer one costs a second request for the rest. The
reader validates the header before it asks for any data.

Data reads are planned. `plan_blocks` turns the byte ranges a job needs into requests: ranges
are sorted, neighbours are merged across gaps only while the gap bytes stay within
`ReadTuning.gap_ratio` (1 %) of the bytes needed, and every merged run is cut into blocks of at
most `ReadTuning.block_size` (16 MiB). Blocks are fetched by at most
`ReadTuning.max_concurrency` (8) threads at once, and each block's bytes are copied straight
into the arrays the reader hands out: fsspec returns a block as one `bytes` object, so that
copy is the one a remote read adds over a local one.

A load announces what it will read (`plan`: every tensor its filter keeps). A read of one
announced range then fetches a window: that range and the announced ranges after it in the
file (then before it: a model's order is not the file's), up to
``block_size * max_concurrency`` bytes, in one concurrent batch; the arrays of the others wait
in the source until read. So peak extra memory is bounded: at most one window of
arrays read ahead and one window of blocks in flight. Nothing outside the announced ranges is
fetched, and an announced range is fetched once.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.errors import InvalidOptionError
from weightstore.io._fs import filesystem_for, read_first, read_range, split_options
from weightstore.io._source import ByteSource, _check_range

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")

__all__ = ["Block", "ReadTuning", "RemoteSource", "open_remote", "plan_blocks", "probe_remote"]

MiB: Final = 2**20

# A probe's source is handed to the open that follows it (`probe_remote`, `open_remote`) when
# that open comes within this many seconds: detecting a format and opening the reader then
# cost one request, not two. Longer, and the object may have been replaced in between.
_PARK_SECONDS: Final = 10.0
_PARK_SLOTS: Final = 4


class ReadTuning:
    """How a `RemoteSource` reads; set per URL as ``storage_options={"weightstore": {...}}``.

    Attributes:
        block_size: bytes of one request at most (16 MiB).
        max_concurrency: requests in flight at once (8). Peak extra memory is about
            ``2 * block_size * max_concurrency``: a window read ahead, and the blocks in flight.
        head_size: bytes of the speculative first request (64 KiB): most headers fit in it.
        gap_ratio: merging neighbouring ranges may fetch unneeded gap bytes up to this
            fraction of the bytes needed (0.01). Larger trades bytes for requests: a slice
            on dim 1 is one range per row, and 3 reads a quarter of each row as whole rows.
    """

    __slots__ = ("block_size", "gap_ratio", "head_size", "max_concurrency")

    def __init__(
        self,
        block_size: int = 16 * MiB,
        max_concurrency: int = 8,
        head_size: int = 64 * 1024,
        gap_ratio: float = 0.01,
    ) -> None:
        for name, value in (
            ("block_size", block_size),
            ("max_concurrency", max_concurrency),
            ("head_size", head_size),
        ):
            if type(value) is not int or value < 1:
                raise InvalidOptionError(
                    f"remote read setting {name} must be a positive int, not {value!r}",
                    option=name,
                )
        if not isinstance(gap_ratio, (int, float)) or not 0 <= gap_ratio < float("inf"):
            raise InvalidOptionError(
                f"remote read setting gap_ratio must be a number of at least 0, not {gap_ratio!r}",
                option="gap_ratio",
            )
        self.block_size, self.max_concurrency = block_size, max_concurrency
        self.head_size, self.gap_ratio = head_size, float(gap_ratio)

    @classmethod
    def from_options(cls, settings: Mapping[str, Any]) -> ReadTuning:
        """The tuning `settings` name (any of the attributes); the defaults for the rest.

        Raises:
            InvalidOptionError: an unknown setting or a bad value.
        """
        unknown = sorted(set(settings) - set(cls.__slots__))
        if unknown:
            raise InvalidOptionError(
                f"no remote read setting is called {unknown[0]!r}; known: "
                + ", ".join(sorted(cls.__slots__)),
                option=unknown[0],
            )
        return cls(**settings)

    @property
    def window_size(self) -> int:
        """Bytes one planned batch reads ahead at most."""
        return self.block_size * self.max_concurrency

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"ReadTuning({values})"


class Block:
    """One request: bytes [start, end) of the object, and where each part of them goes.

    Attributes:
        parts: ``(piece, piece_offset, block_offset, size)``: `size` bytes from `block_offset`
            in this block are bytes `piece_offset`... of piece number `piece`.
    """

    __slots__ = ("end", "parts", "start")

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.parts: list[tuple[int, int, int, int]] = []

    def __repr__(self) -> str:
        return f"Block({self.start}, {self.end}, parts={self.parts})"


def plan_blocks(
    ranges: Sequence[tuple[int, int]], block_size: int, gap_ratio: float = 0.01
) -> list[Block]:
    """The requests that fetch every ``(offset, size)`` of `ranges` (see the module docstring):
    merged across the smallest gaps while the gap bytes stay within `gap_ratio` of the bytes
    needed, split into blocks of at most `block_size` bytes, in offset order.
    """
    order = sorted((r for r in range(len(ranges)) if ranges[r][1] > 0), key=lambda r: ranges[r])
    if not order:
        return []
    needed = sum(ranges[r][1] for r in order)
    # Runs of overlapping or touching ranges first; then the gaps between runs, cheapest first.
    runs: list[list[int]] = []  # [start, end, first index in order, last index + 1]
    for position, r in enumerate(order):
        offset, size = ranges[r]
        if runs and offset <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], offset + size)
            runs[-1][3] = position + 1
        else:
            runs.append([offset, offset + size, position, position + 1])
    budget = int(needed * gap_ratio)
    gaps = sorted(
        (runs[i + 1][0] - runs[i][1], i) for i in range(len(runs) - 1)
    )  # (gap bytes, the run it follows)
    joined: set[int] = set()
    for gap, i in gaps:
        if gap > budget or gap > block_size:
            break
        budget -= gap
        joined.add(i)
    merged: list[list[int]] = []
    for i, run in enumerate(runs):
        if merged and i - 1 in joined:
            merged[-1][1], merged[-1][3] = run[1], run[3]
        else:
            merged.append(list(run))
    blocks: list[Block] = []
    for start, end, first, last in merged:
        cuts = list(range(start, end, block_size))
        run_blocks = [Block(cut, min(cut + block_size, end)) for cut in cuts]
        for r in order[first:last]:
            _assign(run_blocks, start, block_size, r, *ranges[r])
        blocks.extend(run_blocks)
    return blocks


def _assign(
    blocks: list[Block], run_start: int, block_size: int, piece: int, offset: int, size: int
) -> None:
    """Record which bytes of which blocks (of one run) make up piece `piece`."""
    end = offset + size
    first = (offset - run_start) // block_size
    last = (end - 1 - run_start) // block_size
    for block in blocks[first : last + 1]:
        lo, hi = max(offset, block.start), min(end, block.end)
        block.parts.append((piece, lo - offset, lo - block.start, hi - lo))


class RemoteSource(ByteSource):
    """An object at a URL, read by range requests (see the module docstring).

    `read` returns a fresh, writable buffer per range (a view of the kept head for ranges
    inside it), so arrays built on it stay valid after `close`.
    """

    def __init__(
        self, url: str, fs: Any, path: str, head: bytes, size: int, tuning: ReadTuning
    ) -> None:
        self._url, self._fs, self._path = url, fs, path
        self._head = np.frombuffer(bytearray(head), np.uint8)  # writable, as mmap views are
        self._size = size
        self.tuning = tuning
        self._lock = threading.Lock()
        self._planned: dict[int, int] = {}  # announced offset -> size, not fetched yet
        self._plan_order: list[int] = []  # the announced offsets not fetched yet, sorted
        self._ready: dict[tuple[int, int], np.ndarray[Any, Any]] = {}  # fetched, not yet read
        self._ready_size = 0
        self._closed = False

    @classmethod
    def open(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> RemoteSource:
        """Open `url` with one request (`weightstore.io._fs.read_first`).

        Raises:
            InvalidOptionError: bad read settings, or the filesystem's package is missing.
            FileMissingError: no object at `url`.
            RemoteReadError: the request failed.
        """
        _, settings = split_options(storage_options)
        tuning = ReadTuning.from_options(settings)
        fs, path = filesystem_for(url, storage_options)
        head, size = read_first(fs, path, url, tuning.head_size)
        return cls(url, fs, path, head, size, tuning)

    @property
    def name(self) -> str:
        """The URL, for messages."""
        return self._url

    @property
    def size(self) -> int:
        return self._size

    @property
    def head(self) -> bytes:
        """The bytes the first request brought (the object's first bytes)."""
        return self._head.tobytes()

    # -- reads ----------------------------------------------------------------------------------

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        """Exactly `size` bytes from `offset`: from the head, from a planned window, or fetched
        now (split into blocks fetched concurrently).

        Raises:
            TruncatedError: the range lies outside the object.
            RemoteReadError, FileMissingError: a request failed.
        """
        self._check_open()
        _check_range(self, offset, size, what, tensor)
        end = offset + size
        if end <= self._head.size:
            view: memoryview = self._head[offset:end].data
            return view
        planned = self._take_planned(offset, size)
        if planned is not None:
            return planned.data
        buffer = np.empty(size, np.uint8)
        self._fill([(offset, buffer)])
        return buffer.data

    def read_into(
        self, offset: int, array: np.ndarray[Any, Any], what: str, tensor: str | None = None
    ) -> None:
        """Fill the uint8 `array` with the bytes from `offset` (a caller's own buffer, placed
        as it needs: the PyTorch reader aligns payloads so)."""
        self._check_open()
        _check_range(self, offset, array.size, what, tensor)
        self._fill([(offset, array)])

    def read_runs(
        self, runs: Sequence[tuple[int, int]], what: str, tensor: str | None = None
    ) -> np.ndarray[Any, Any]:
        """The ``(offset, size)`` runs laid end to end in one array, fetched as one plan."""
        self._check_open()
        for offset, size in runs:
            _check_range(self, offset, size, what, tensor)
        buffer = np.empty(sum(size for _, size in runs), np.uint8)
        pieces, position = [], 0
        for offset, size in runs:
            pieces.append((offset, buffer[position : position + size]))
            position += size
        self._fill(pieces)
        return buffer

    def plan(self, ranges: Iterable[tuple[int, int]]) -> None:
        """Announce the ranges a job will `read`, each exactly (see the module docstring);
        replaces an earlier plan. Ranges the head holds, or outside the object, are ignored."""
        head, total = self._head.size, self._size
        kept = {
            offset: size
            for offset, size in ranges
            if size > 0 and offset + size > head and offset >= 0 and offset + size <= total
        }
        with self._lock:
            self._planned = kept
            self._plan_order = sorted(kept)

    def _take_planned(self, offset: int, size: int) -> np.ndarray[Any, Any] | None:
        """The array of an announced range: read ahead already, or fetched now with the
        window after it; None for a range no plan announced."""
        with self._lock:
            ready = self._ready.pop((offset, size), None)
            if ready is not None:
                self._ready_size -= size
                return ready
            if self._planned.get(offset) != size:
                return None
            window = self._window(offset)
        arrays = [(start, np.empty(length, np.uint8)) for start, length in window]
        self._fill(arrays)
        with self._lock:
            for (start, length), (_, array) in zip(window[1:], arrays[1:], strict=True):
                self._ready[(start, length)] = array
                self._ready_size += length
        return arrays[0][1]

    def _window(self, offset: int) -> list[tuple[int, int]]:
        """Take `offset` and the announced ranges after it, then those before it, within the
        window's budget, out of the plan (called under the lock). A load reads in its model's
        order, not the file's: the ranges before the first one read are wanted too."""
        order, planned = self._plan_order, self._planned
        first = bisect.bisect_left(order, offset)
        budget = self.tuning.window_size - self._ready_size
        taken, total = first + 1, planned[offset]
        while taken < len(order) and total + planned[order[taken]] <= budget:
            total += planned[order[taken]]
            taken += 1
        while first > 0 and total + planned[order[first - 1]] <= budget:
            first -= 1
            total += planned[order[first]]
        window = [(start, planned.pop(start)) for start in order[first:taken]]
        del order[first:taken]
        window.sort(key=lambda entry: entry[0] != offset)  # the one asked for first
        return window

    def _fill(self, pieces: Sequence[tuple[int, np.ndarray[Any, Any]]]) -> None:
        """Fill each ``(offset, array)``: the head's part from the head, the rest by requests
        planned with `plan_blocks` and fetched by at most ``max_concurrency`` threads."""
        head = self._head
        rest: list[tuple[int, np.ndarray[Any, Any]]] = []
        for offset, array in pieces:
            if offset < head.size:
                kept = min(array.size, head.size - offset)
                array[:kept] = head[offset : offset + kept]
                offset, array = offset + kept, array[kept:]
            if array.size:
                rest.append((offset, array))
        tuning = self.tuning
        blocks = plan_blocks([(o, a.size) for o, a in rest], tuning.block_size, tuning.gap_ratio)
        targets = [array for _, array in rest]
        if len(blocks) <= 1:
            for block in blocks:
                self._fetch(block, targets)
            return
        with ThreadPoolExecutor(min(tuning.max_concurrency, len(blocks))) as pool:
            futures = [pool.submit(self._fetch, block, targets) for block in blocks]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                for future in futures:
                    future.cancel()  # the queued blocks; those running finish, then the pool
                raise

    def _fetch(self, block: Block, targets: Sequence[np.ndarray[Any, Any]]) -> None:
        """One request, its bytes copied into the arrays its parts belong to."""
        data = read_range(self._fs, self._path, self._url, block.start, block.end - block.start)
        got = np.frombuffer(data, np.uint8)
        for piece, piece_offset, block_offset, size in block.parts:
            targets[piece][piece_offset : piece_offset + size] = got[
                block_offset : block_offset + size
            ]

    def close(self) -> None:
        """Forget the plan and the arrays read ahead; arrays handed out stay valid."""
        with self._lock:
            self._closed = True
            self._planned, self._plan_order = {}, []
            self._ready, self._ready_size = {}, 0

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self._url}: the file is closed")


# -- a probe's source, handed to the open that follows it ------------------------------------

_parked: dict[tuple[str, str], tuple[float, RemoteSource]] = {}
_parked_lock = threading.Lock()


def _park_key(url: str, storage_options: Mapping[str, Any] | None) -> tuple[str, str]:
    return url, repr(sorted((storage_options or {}).items(), key=lambda item: str(item[0])))


def probe_remote(url: str, storage_options: Mapping[str, Any] | None = None) -> RemoteSource:
    """Open `url` for a look at its first bytes; the source is kept for a few seconds, and the
    next `open_remote` of the same URL and options takes it instead of opening again (a second
    probe looks at the same one)."""
    key = _park_key(url, storage_options)
    with _parked_lock:
        parked = _parked.pop(key, None)
    now = time.monotonic()
    fresh = parked is not None and now - parked[0] <= _PARK_SECONDS
    source = parked[1] if parked is not None and fresh else RemoteSource.open(url, storage_options)
    with _parked_lock:
        for key, (when, _) in list(_parked.items()):
            if now - when > _PARK_SECONDS:
                del _parked[key]
        while len(_parked) >= _PARK_SLOTS:
            del _parked[next(iter(_parked))]
        _parked[key] = (now if parked is None or not fresh else parked[0], source)
    return source


def open_remote(url: str, storage_options: Mapping[str, Any] | None = None) -> RemoteSource:
    """A `RemoteSource` over `url`: the one a probe just opened, else a new one."""
    with _parked_lock:
        parked = _parked.pop(_park_key(url, storage_options), None)
    if parked is not None and time.monotonic() - parked[0] <= _PARK_SECONDS:
        return parked[1]
    return RemoteSource.open(url, storage_options)
