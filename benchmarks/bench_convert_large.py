"""`weightstore convert` of a `.pt` checkpoint larger than half the machine's memory.

Issue 12 asks that `weightstore convert model.pt model.safetensors` hold peak resident memory
to the largest tensor plus 128 MiB whatever the model's size, and take at most 1.2x the time of
the obvious script (``torch.load(mmap=True, weights_only=True)`` + ``save_file`` + fsync, since
our convert fsyncs). A model smaller than memory cannot show the first: everything fits either
way. So this script writes a `torch.save` file of ``--size-gib`` (default: 55% of MemTotal) in
tensors of ``--tensor-mib`` each, then runs each side once in a fresh process, ours first,
recording wall time and peak RSS (``ru_maxrss`` from ``wait4``; it counts the mapped file pages
a process keeps resident, which is what a reader of a mapped file can pile up). It then checks
both outputs hold the same tensor values as the source.

    .venv/bin/python benchmarks/bench_convert_large.py --dir /var/tmp/big   # ~13 GiB here
    .venv/bin/python benchmarks/bench_convert_large.py --size-gib 1          # minutes -> seconds

Needs torch and safetensors, Linux, and about three times ``--size-gib`` of free disk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from typing import Any

from bench_proc import run_with_peak_rss

MIB = 1 << 20
GIB = 1 << 30

WRITE_SOURCE = textwrap.dedent(
    """
    import sys, torch
    path, count, numel = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # Distinct, cheap values per tensor: a ramp offset by the tensor's index.
    state = {f"layers.{i}.weight": torch.arange(numel, dtype=torch.float32).add_(i)
             for i in range(count)}
    torch.save(state, path)
    """
)

PEER = textwrap.dedent(
    """
    import os, sys, torch
    from safetensors.torch import save_file
    source, destination = sys.argv[1], sys.argv[2]
    save_file(torch.load(source, mmap=True, weights_only=True), destination)
    fd = os.open(destination, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    fd = os.open(os.path.dirname(os.path.abspath(destination)), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    """
)

CHECK = textwrap.dedent(
    """
    import sys, numpy as np
    from safetensors import safe_open
    ours, peer, count, numel = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ramp = np.arange(numel, dtype=np.float32)
    with safe_open(ours, "np") as a, safe_open(peer, "np") as b:
        assert sorted(a.keys()) == sorted(b.keys()), "different names"
        assert len(a.keys()) == count, "wrong tensor count"
        for name in a.keys():
            index = int(name.split(".")[1])
            x, y = a.get_tensor(name), b.get_tensor(name)
            assert np.array_equal(x, y), name
            assert np.array_equal(x, ramp + np.float32(index)), name
    print("ok")
    """
)


def mem_total() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def console(name: str) -> str:
    """The console script installed beside this interpreter."""
    return os.path.join(os.path.dirname(sys.executable), name)


def measured(argv: list[str]) -> dict[str, float]:
    """Run `argv` to completion; its wall seconds and peak RSS in bytes."""
    seconds, peak_rss = run_with_peak_rss(argv, label=" ".join(argv[:3]))
    return {"seconds": seconds, "peak_rss": peak_rss}


@contextlib.contextmanager
def scratch(directory: str | None) -> Iterator[str]:
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
        yield directory
        return
    made = tempfile.mkdtemp(prefix="bench-convert-")
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=None, help="default: 55%% of RAM")
    parser.add_argument("--tensor-mib", type=int, default=256)
    parser.add_argument("--dir", default=None, help="scratch directory (kept if given)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    size = int((args.size_gib * GIB) if args.size_gib else 0.55 * mem_total())
    numel = args.tensor_mib * MIB // 4
    count = max(1, size // (numel * 4))
    model_bytes = count * numel * 4
    bound = numel * 4 + 128 * MIB
    with scratch(args.dir) as directory:
        source = os.path.join(directory, "model.pt")
        ours_out = os.path.join(directory, "ours.safetensors")
        peer_out = os.path.join(directory, "peer.safetensors")
        print(f"writing {count} x {args.tensor_mib} MiB = {model_bytes / GIB:.2f} GiB to {source}")
        print(f"memory: {mem_total() / GIB:.1f} GiB; bound for ours: {bound / MIB:.0f} MiB")
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", WRITE_SOURCE, source, str(count), str(numel)], check=True
        )
        print(f"  written in {time.perf_counter() - started:.1f} s")
        for path in (ours_out, peer_out):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        ours = measured([console("weightstore"), "convert", "--quiet", source, ours_out])
        print(f"ours: {ours['seconds']:.1f} s, peak RSS {ours['peak_rss'] / MIB:.0f} MiB")
        peer = measured([sys.executable, "-c", PEER, source, peer_out])
        print(f"peer: {peer['seconds']:.1f} s, peak RSS {peer['peak_rss'] / MIB:.0f} MiB")
        subprocess.run(
            [sys.executable, "-c", CHECK, ours_out, peer_out, str(count), str(numel)],
            check=True,
        )
        result: dict[str, Any] = {
            "model_bytes": model_bytes,
            "tensors": count,
            "largest_tensor_bytes": numel * 4,
            "mem_total_bytes": mem_total(),
            "bound_bytes": bound,
            "ours": ours,
            "peer": peer,
            "time_ratio": ours["seconds"] / peer["seconds"],
            "within_bound": ours["peak_rss"] <= bound,
        }
    print(
        f"time ratio ours/peer {result['time_ratio']:.2f} (target <= 1.2); "
        f"ours peak {ours['peak_rss'] / MIB:.0f} MiB vs bound {bound / MIB:.0f} MiB: "
        + ("within" if result["within_bound"] else "OVER")
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0 if result["within_bound"] else 1


if __name__ == "__main__":
    sys.exit(main())
