"""GGUF dequantization: weightstore's NumPy kernels against gguf-py's `quants.dequantize` on
the same Q4_K, Q6_K and Q8_0 tensors, at several sizes.

    .venv/bin/python benchmarks/bench_gguf_dequant.py              # 1, 4, 16, 64 M elements
    .venv/bin/python benchmarks/bench_gguf_dequant.py --quick      # 64 Ki, 256 Ki: seconds
    .venv/bin/python benchmarks/bench_gguf_dequant.py --sizes 1,4 --types Q8_0 --repeat 9

Each tensor is ``(rows, 4096)`` elements of random blocks whose float16 scales are finite
values of a weight's size (random scale bytes would make inf and NaN, which neither side
treats as a fast path). Both sides turn the same bytes into float32; the script checks once
that the outputs agree bit for bit. NumPy's elementwise loops use one thread, so both sides run
on one core: **MB/s** is float32 output per second on that core, **ratio** = gguf-py's median
÷ ours (above 1, ours is faster). Both return a fresh array, whose first touch costs page
faults on either side; the last two columns are ours writing into one reused array
(`dequantize_into`), which is how a load into an existing tensor runs.

Times are the median (min) of `--repeat` calls after one warm-up call, ours and gguf-py's
alternating call by call. Rates and ratios use CPU seconds of this process
(`time.process_time`), which other processes on a busy machine do not inflate the way they do
wall time; the JSON holds both. Imports are not timed, so bytecode compilation does not count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weightstore.quantized import GGML_TYPES_BY_NAME, dequantize_blocks, dequantize_into

ROW_ELEMENTS = 4096
SCALE_FIELDS = {"Q4_K": [0, 2], "Q6_K": [208], "Q8_0": [0]}  # float16 scale byte offsets


def tensor_bytes(name: str, elements: int, seed: int) -> np.ndarray:
    """A ``(rows, row_bytes)`` uint8 tensor of random `name` blocks with sane scales."""
    ggml = GGML_TYPES_BY_NAME[name]
    rng = np.random.default_rng(seed)
    n_blocks = elements // ggml.block_size
    blocks = rng.integers(0, 256, (n_blocks, ggml.type_size), dtype=np.uint8)
    for at in SCALE_FIELDS[name]:
        scales = (rng.standard_normal((n_blocks, 1)) * 0.02).astype("<f2")
        blocks[:, at : at + 2] = scales.view(np.uint8)
    return blocks.reshape(elements // ROW_ELEMENTS, -1)


def alternating(
    calls: dict[str, Callable[[], object]], repeat: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """Median and minimum CPU and wall seconds of each call, `repeat` rounds after one untimed
    warm-up each."""
    cpu: dict[str, list[float]] = {key: [] for key in calls}
    wall: dict[str, list[float]] = {key: [] for key in calls}
    for call in calls.values():
        call()
    for _ in range(repeat):
        for key, call in calls.items():
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            call()
            cpu[key].append(time.process_time() - start_cpu)
            wall[key].append(time.perf_counter() - start_wall)
    return {
        key: {
            "cpu": (statistics.median(cpu[key]), min(cpu[key])),
            "wall": (statistics.median(wall[key]), min(wall[key])),
        }
        for key in calls
    }


def measure(name: str, elements: int, repeat: int) -> dict[str, Any]:
    """One row: both sides on the same `elements`-element tensor of `name` blocks."""
    import gguf

    ggml = GGML_TYPES_BY_NAME[name]
    qtype = gguf.GGMLQuantizationType[name]
    data = tensor_bytes(name, elements, seed=elements)
    ours = dequantize_blocks(data, ggml)
    theirs = gguf.quants.dequantize(data, qtype).reshape(-1)
    if not np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)):
        raise SystemExit(f"{name}, {elements:,} elements: the outputs differ")
    del theirs
    calls: dict[str, Callable[[], object]] = {
        "ours": lambda: dequantize_blocks(data, ggml),
        "into": lambda: dequantize_into(data, ggml, ours),
        "gguf": lambda: gguf.quants.dequantize(data, qtype),
    }
    times = alternating(calls, repeat)
    megabytes = elements * 4 / 1e6
    fresh, into, theirs = (times[key]["cpu"][0] for key in ("ours", "into", "gguf"))
    return {
        "type": name,
        "elements": elements,
        **times,
        "ours_mb_s": megabytes / fresh,
        "into_mb_s": megabytes / into,
        "gguf_mb_s": megabytes / theirs,
        "ratio": theirs / fresh,
        "ratio_into": theirs / into,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 Ki and 256 Ki elements")
    parser.add_argument("--sizes", default="1,4,16,64", help="M elements (2**20), comma-separated")
    parser.add_argument("--types", default="Q4_K,Q6_K,Q8_0")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="also write every row as JSON here")
    args = parser.parse_args()
    if args.quick:
        sizes = [1 << 16, 1 << 18]
    else:
        sizes = [int(float(size) * (1 << 20)) for size in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    print(f"{'type':<6} {'elements':>11} {'ours CPU ms':>17} {'gguf-py CPU ms':>17} "
          f"{'ours MB/s':>10} {'gguf MB/s':>10} {'ratio':>7} {'into MB/s':>10} "
          f"{'ratio':>7}")  # fmt: skip
    for name in args.types.split(","):
        for elements in sizes:
            row = measure(name, elements, args.repeat)
            rows.append(row)
            ours, gguf = row["ours"]["cpu"], row["gguf"]["cpu"]
            print(f"{name:<6} {elements:>11,} "
                  f"{f'{ours[0] * 1e3:,.1f} ({ours[1] * 1e3:,.1f})':>17} "
                  f"{f'{gguf[0] * 1e3:,.1f} ({gguf[1] * 1e3:,.1f})':>17} "
                  f"{row['ours_mb_s']:>10,.0f} {row['gguf_mb_s']:>10,.0f} "
                  f"{row['ratio']:>6.2f}x {row['into_mb_s']:>10,.0f} "
                  f"{row['ratio_into']:>6.2f}x")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
