"""Load time by I/O mode on a FUSE file system that delays every read request, as a network
file system's round trip does, against safetensors' own ``load_file`` (which maps the file).

A SafeTensors file of `--tensors` float32 tensors of `--tensor-mib` each is written to a
folder that `tests/io/_fuse_passthrough.py` serves (mfusepy over libfuse 3; needs ``fuse3``
installed and /dev/fuse), each read request delayed by `--latency-ms`. Each measurement is a
fresh process loading the whole file into a NumPy dict through ``SafetensorsStore.with_io
(mode)``, on a fresh mount (the kernel keeps nothing of the file between them), the modes and
the peer alternated round by round; the median of `--rounds` is printed, with the ratio to the
peer and the mount's request count.

Run ``.venv/bin/python benchmarks/bench_io_engine.py`` (``--quick``: a 16 MiB file, 2 rounds).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_LOAD = textwrap.dedent(
    """
    import sys, time
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "safetensors":
        from safetensors.numpy import load_file
        start = time.perf_counter()
        tensors = load_file(path)
        for array in tensors.values():
            array.sum()  # touch every page: a mapping reads lazily
    else:
        import numpy as np
        from weightstore import SafetensorsStore
        store = SafetensorsStore.from_file(path).with_io(mode)
        model = {name: np.zeros(shape, np.float32) for name, shape in
                 ((n, store.reader().descriptor(n).shape) for n in store.keys())}
        start = time.perf_counter()
        assert store.apply_to(model).is_success()
    print(time.perf_counter() - start)
    """
)
_MODES = ("safetensors", "mmap", "pread", "direct", "auto")


@contextlib.contextmanager
def _mounted(root: Path, mountpoint: Path, latency_ms: float) -> Iterator[Path]:
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tests.io._fuse_passthrough", str(root), str(mountpoint),
         str(latency_ms)],
        cwd=_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not (mountpoint / ".requests").exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the FUSE passthrough did not mount (fuse3, /dev/fuse?)")
            time.sleep(0.05)
        yield mountpoint
    finally:
        done = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True)
        if done.returncode != 0:  # still in use: detach it
            subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)
        daemon.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--tensor-mib", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="4 tensors of 4 MiB, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.tensors, args.rounds = 4, 2
    compileall.compile_dir(str(_ROOT / "src"), quiet=1)  # time the library, not the compiler
    import numpy as np

    from weightstore import SafetensorsStore, save_into

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as scratch_dir:
        scratch = Path(scratch_dir)
        root, mountpoint = scratch / "root", scratch / "mnt"
        root.mkdir()
        mountpoint.mkdir()
        rows = args.tensor_mib * 2**20 // 4 // 1024
        rng = np.random.default_rng(0)
        tensors = {
            f"t{i}": rng.standard_normal((rows, 1024), np.float32) for i in range(args.tensors)
        }
        save_into(tensors, SafetensorsStore.from_file(root / "m.safetensors"))
        del tensors
        times: dict[str, list[float]] = {mode: [] for mode in _MODES}
        requests: dict[str, int] = {}
        for _ in range(args.rounds):
            for mode in _MODES:
                with _mounted(root, mountpoint, args.latency_ms):
                    done = subprocess.run(
                        [sys.executable, "-c", _LOAD, mode, str(mountpoint / "m.safetensors")],
                        check=True, capture_output=True, text=True,
                    )  # fmt: skip
                    times[mode].append(float(done.stdout.split()[-1]))
                    requests[mode] = int((mountpoint / ".requests").read_text().split()[0])
        size = args.tensors * args.tensor_mib
        print(f"{args.tensors} x {args.tensor_mib} MiB ({size} MiB) on FUSE, {args.latency_ms} "
              f"ms a request; median of {args.rounds}, fresh mount each")  # fmt: skip
        peer = statistics.median(times["safetensors"])
        print("mode         seconds  MB/s     vs safetensors  requests")
        for mode in _MODES:
            median = statistics.median(times[mode])
            rate = size * 2**20 / 1e6 / median
            print(
                f"{mode:12} {median:7.3f} {rate:7.0f} {median / peer:12.3f}x  {requests[mode]:9,}"
            )


if __name__ == "__main__":
    main()
