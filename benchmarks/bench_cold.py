"""Cold loads against the disk's own sequential-read floor, measured in the same run.

A SafeTensors file of float32 tensors (64 MiB each) is written once per size. Before every
measurement the file is evicted from the page cache (``posix_fadvise(DONTNEED)``, after an
fsync), and each measurement is a fresh process, the rows alternated round by round:

- the floor: the file read start to end in 8 MiB reads into one reused buffer (buffered), and
  the same with ``O_DIRECT`` (aligned buffer, page cache bypassed);
- weightstore: ``SafetensorsStore.with_io(mode).apply_to`` a NumPy dict, for ``auto`` (a
  mapping on this disk), ``pread`` (threaded) and ``direct``;
- the peer: ``safetensors.numpy.load_file`` with every array touched.

Printed per size: the median seconds of each row, its share of the better floor's bandwidth
(floor time / row time: 1.00 is the disk's speed) and its ratio to safetensors. Only the
guest's page cache is dropped: the VM's host may still hold the blocks, so "cold" here is the
guest's view. Run ``.venv/bin/python benchmarks/bench_cold.py --sizes-mib 256 1024`` (``--quick``:
64 MiB, 2 rounds).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_RUN = textwrap.dedent(
    """
    import mmap, os, sys, time
    row, path = sys.argv[1], sys.argv[2]
    if row.startswith("floor"):
        flags = os.O_RDONLY | (os.O_DIRECT if row == "floor-direct" else 0)
        buffer = mmap.mmap(-1, 8 << 20)  # page-aligned, as O_DIRECT wants
        start = time.perf_counter()
        fd = os.open(path, flags)
        offset = 0
        while True:
            got = os.preadv(fd, [buffer], offset)
            if got <= 0:
                break
            offset += got
        os.close(fd)
    elif row == "safetensors":
        from safetensors.numpy import load_file
        start = time.perf_counter()
        for array in load_file(path).values():
            array.sum()  # touch every page: a mapping reads lazily
    else:
        import numpy as np
        from weightstore import SafetensorsStore
        store = SafetensorsStore.from_file(path).with_io(row.split()[-1])
        reader = store.reader()
        model = {n: np.empty(reader.descriptor(n).shape, np.float32) for n in store.keys()}
        start = time.perf_counter()
        assert store.apply_to(model).is_success()
    print(time.perf_counter() - start)
    """
)
_ROWS = ("floor-buffered", "floor-direct", "ws auto", "ws pread", "ws direct", "safetensors")


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="64 MiB, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.sizes_mib, args.rounds = [64], 2
    compileall.compile_dir(str(_ROOT / "src"), quiet=1)  # time the library, not the compiler
    import numpy as np

    from weightstore import SafetensorsStore, save_into

    print("size_MiB row             seconds  of_floor  vs_safetensors")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as scratch:
        for size in args.sizes_mib:
            path = Path(scratch) / f"m{size}.safetensors"
            rng = np.random.default_rng(0)
            count = max(1, size // 64)
            tensors = {
                f"t{i}": rng.standard_normal((16384, 1024), np.float32) for i in range(count)
            }
            save_into(tensors, SafetensorsStore.from_file(path))
            del tensors
            times: dict[str, list[float]] = {row: [] for row in _ROWS}
            for _ in range(args.rounds):
                for row in _ROWS:
                    _evict(path)
                    done = subprocess.run([sys.executable, "-c", _RUN, row, str(path)],
                                          check=True, capture_output=True, text=True)  # fmt: skip
                    times[row].append(float(done.stdout.split()[-1]))
            floor = min(statistics.median(times["floor-buffered"]),
                        statistics.median(times["floor-direct"]))  # fmt: skip
            peer = statistics.median(times["safetensors"])
            for row in _ROWS:
                median = statistics.median(times[row])
                print(f"{size:8} {row:15} {median:8.3f} {floor / median:9.2f} "
                      f"{median / peer:15.3f}x")  # fmt: skip
            path.unlink()


if __name__ == "__main__":
    main()
