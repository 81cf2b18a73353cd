"""What checking digests costs (docs/integrity.md): each algorithm's hashing throughput against
a plain read of the same bytes, and a verified warm load of bench_paths.py's model against an
unverified one of the same file.

    .venv/bin/python benchmarks/bench_digests.py            # the 433 MB model, ~1 min
    .venv/bin/python benchmarks/bench_digests.py --quick    # a 1 MB model, seconds

Rows:
- ``read``: the tensor bytes of the mapped, warm file copied into fresh memory (`bytes`), the
  cost any reader that hands out a copy pays; ``touch`` reads one byte per 4 KiB page of the
  mapping, the floor a zero-copy view pays.
- ``hash ALG``: the same mapped bytes hashed by each algorithm, tensor by tensor.
- ``load``: `load_from(model, SafetensorsStore.from_file(p))` into a built torch model, warm
  page cache, of the file saved ``with_digests(ALG)``; ``verify_digests(False)`` is the
  unverified row (the same file, no hashing). **ratio** = row ÷ the unverified load.

Times are the median (min) of `--repeat` calls after one warm-up call, in this process (imports
are not timed, so bytecode compilation does not count).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bench_paths import FULL_SHAPE, MODEL_CODE, QUICK_SHAPE
from weightstore import SafetensorsStore, load_from, open_reader
from weightstore.io._digest import ALGORITHMS, new_hasher


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median and minimum seconds of `repeat` calls after one untimed warm-up."""
    call()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), min(samples)


def available() -> list[str]:
    names = []
    for name in ALGORITHMS:
        try:
            new_hasher(name)
        except Exception:
            continue
        names.append(name)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 1 MB model")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", help="scratch directory (default: a new temporary one)")
    parser.add_argument("--json", help="also write every row as JSON here")
    args = parser.parse_args()
    namespace: dict[str, Any] = {}
    exec(MODEL_CODE, namespace)
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    build = namespace["build"]
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="bench-digests-"))
    scratch.mkdir(parents=True, exist_ok=True)
    algorithms = available()
    model = build((shape.vocab, shape.hidden, shape.ffn, shape.layers))
    paths = {}
    for name in algorithms:
        path = scratch / f"model-{name}.safetensors"
        SafetensorsStore.from_file(path).overwrite().with_digests(name).collect_from(model)
        paths[name] = path
    first = paths[algorithms[0]]
    with open_reader(first) as reader:
        spans = [reader.descriptor(n).data_offsets for n in reader.names()]
        data_start = reader.data_start
    nbytes = sum(end - start for start, end in spans)
    rows: list[dict[str, Any]] = []

    with open(first, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        tensors = [view[data_start + start : data_start + end] for start, end in spans]

        def read() -> None:
            for tensor in tensors:
                bytes(tensor)

        def touch() -> None:
            for tensor in tensors:
                sum(tensor[::4096])

        rows.append({"row": "read (copy)", "times": timed(read, args.repeat)})
        rows.append({"row": "touch (one byte a page)", "times": timed(touch, args.repeat)})
        for name in algorithms:

            def hash_all(name: str = name) -> None:
                for tensor in tensors:
                    hasher = new_hasher(name)
                    hasher.update(tensor)
                    hasher.hexdigest()

            rows.append({"row": f"hash {name}", "times": timed(hash_all, args.repeat)})
        tensors.clear()  # the slices go before the mapping closes
        view.release()

    unverified = timed(
        lambda: load_from(model, SafetensorsStore.from_file(first).verify_digests(False)),
        args.repeat,
    )
    rows.append({"row": "load, verify_digests(False)", "times": unverified, "ref": True})
    for name in algorithms:
        path = paths[name]
        times = timed(
            lambda path=path: load_from(model, SafetensorsStore.from_file(path)), args.repeat
        )
        rows.append({"row": f"load, verified {name}", "times": times})

    print(f"{nbytes / 1e6:,.1f} MB of tensor data, {len(spans)} tensors, warm page cache")
    print(f"{'row':<32} {'median (min)':>22} {'GB/s':>7} {'ratio':>7}")
    reference = unverified[0]
    for row in rows:
        median, least = row["times"]
        ratio = f"{median / reference:.2f}x" if row["row"].startswith("load") else ""
        shown = f"{median * 1e3:,.1f} ms ({least * 1e3:,.1f})"
        print(f"{row['row']:<32} {shown:>22} {nbytes / median / 1e9:>7.2f} {ratio:>7}")
    if args.json:
        Path(args.json).write_text(json.dumps({"nbytes": nbytes, "rows": rows}, indent=2))
    if args.dir is None:
        for path in paths.values():
            os.unlink(path)
        scratch.rmdir()


if __name__ == "__main__":
    main()
