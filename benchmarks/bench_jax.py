"""A 1 GiB burnpack load into JAX on the CPU, against touching the same file through mmap.

docs/jax.md claims that a burnpack load into a JAX model copies nothing on the CPU: JAX aliases
64-byte aligned host memory, and burnpack aligns every tensor to 256 bytes of a page-aligned
mapping. So a load should cost what touching the mapped file costs, and the target is at most
1.1x an mmap touch. Rows, each timed `--repeat` times after one untimed warm-up, median shown;
the model is built (``nnx.eval_shape``) untimed before each call:

    mmap+touch                 the floor: map the file, touch one byte per 4 KiB page
    nnx load                   `load_from` into an abstract NNX model (`nnx.eval_shape`)
    nnx load+touch             the same, then one byte per page read through the JAX arrays
    nnx load+touch (4 devices) the kernels split by rows over 4 CPU devices, each device's
                               callback reading its rows alone
    safetensors load+touch     the same model from a SafeTensors file, which aligns tensors to
                               their element size only, so JAX copies them (for contrast)
    ... (cold)                 the file dropped from the page cache before each call
                               (POSIX_FADV_DONTNEED, checked with mincore; skipped where the
                               machine cannot), so the disk is read: a first load

Every row's arrays are checked to lie inside the file's mapping (or, for SafeTensors, not), so
the figures are of the zero-copy path. The bytes each device read are counted at the byte
source for the 4-device row.

    .venv/bin/python benchmarks/bench_jax.py                 # 1 GiB, ~1 min
    .venv/bin/python benchmarks/bench_jax.py --size-mib 64   # seconds

Needs jax and flax (the ``jax`` extra), Linux (/proc/self/maps), and twice `--size-mib` of disk.
"""

from __future__ import annotations

import argparse
import functools
import gc
import mmap
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 4)  # before any backend starts

import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from bench_io import evict, resident_fraction  # noqa: E402
from weightstore import BurnpackStore, SafetensorsStore, TensorSnapshot, save_into  # noqa: E402
from weightstore.dtypes import from_name  # noqa: E402
from weightstore.io._source import MmapSource  # noqa: E402

MIB = 1 << 20
PAGE = 4096
WIDTH = 4096  # a 4096 x 4096 float32 kernel is 64 MiB


class Stack(nnx.Module):
    """`layers` Linear(4096, 4096) kernels without bias: 64 MiB each."""

    def __init__(self, layers: int, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List(
            [nnx.Linear(WIDTH, WIDTH, use_bias=False, rngs=rngs) for _ in range(layers)]
        )


def _write(directory: Path, layers: int) -> tuple[Path, Path]:
    """The model as a burnpack and a SafeTensors file, one tensor in memory at a time."""
    f32 = from_name("F32")

    def kernel(index: int) -> Callable[[], np.ndarray[Any, Any]]:
        return lambda: np.full((WIDTH, WIDTH), index, np.float32)

    snapshots = [
        TensorSnapshot(("layers", str(i), "kernel"), f32, (WIDTH, WIDTH), kernel(i))
        for i in range(layers)
    ]
    save_into(snapshots, BurnpackStore.from_file(directory / "model").overwrite())
    save_into(snapshots, SafetensorsStore.from_file(directory / "model.safetensors").overwrite())
    return directory / "model.bpk", directory / "model.safetensors"


def _touch(array: np.ndarray[Any, Any]) -> int:
    """Read one byte per page of `array`'s memory."""
    return int(array.reshape(-1).view(np.uint8)[::PAGE].sum())


def _mmap_touch(path: Path) -> None:
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        _touch(np.frombuffer(mapped, np.uint8))


def _kernels(model: Stack) -> list[jax.Array]:
    return [layer.kernel.get_value() for layer in model.layers]


def _abstract(layers: int) -> Stack:
    """The model with no arrays, as ``nnx.eval_shape`` builds it (untimed: tracing the
    constructor costs about what the load does, and a user pays it with or without us)."""
    model: Stack = nnx.eval_shape(lambda: Stack(layers, nnx.Rngs(0)))
    return model


def _load(path: Path, model: Stack, touch: bool, device: Any = None) -> Stack:
    store = (BurnpackStore if path.suffix == ".bpk" else SafetensorsStore).from_file(path)
    result = store.apply_to(model, device=device)
    assert result.is_success(), result
    if touch:
        for kernel in _kernels(model):
            for shard in kernel.addressable_shards:
                _touch(np.asarray(shard.data))
    return model


def _mapped(path: Path) -> list[tuple[int, int]]:
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith(str(path)):
            start, end = line.split()[0].split("-")
            ranges.append((int(start, 16), int(end, 16)))
    return ranges


def _aliased(model: Stack, path: Path) -> tuple[int, int]:
    """(shards inside the file's mapping, shards in all)."""
    ranges = _mapped(path)
    shards = [shard.data for kernel in _kernels(model) for shard in kernel.addressable_shards]
    inside = sum(
        any(lo <= s.unsafe_buffer_pointer() and s.unsafe_buffer_pointer() + s.nbytes <= hi
            for lo, hi in ranges)
        for s in shards
    )  # fmt: skip
    return inside, len(shards)


def _time(
    run: Callable[[Any], Any], repeat: int, prepare: Callable[[], Any] = lambda: None
) -> float:
    """Median seconds of `run(prepare())`, `prepare` untimed; one warm-up call first (page
    cache, JAX's first-use costs)."""
    run(prepare())
    samples = []
    for _ in range(repeat):
        argument = prepare()
        start = time.perf_counter()
        kept = run(argument)
        samples.append(time.perf_counter() - start)
        del kept, argument  # the next `prepare` may evict the file: nothing may map it then
    return statistics.median(samples)


def _cold(path: Path, then: Callable[[], Any] = lambda: None) -> Callable[[], Any]:
    """A `prepare` that drops `path` from the page cache (after freeing the last call's
    arrays, whose mapping would keep its pages), then runs `then`."""

    def prepare() -> Any:
        gc.collect()
        evict(str(path))
        return then()

    return prepare


def _rows_split(mesh: Mesh) -> Callable[[str, tuple[int, ...]], Any]:
    return lambda path, shape: NamedSharding(mesh, P("x", None))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    layers = max(1, args.size_mib // 64)
    size = layers * WIDTH * WIDTH * 4
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        bpk, safetensors = _write(Path(scratch), layers)
        mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
        split = _rows_split(mesh)
        model = functools.partial(_abstract, layers)
        rows: list[tuple[str, float]] = [
            ("mmap+touch", _time(lambda _: _mmap_touch(bpk), args.repeat)),
            ("nnx load", _time(lambda m: _load(bpk, m, False), args.repeat, model)),
            ("nnx load+touch", _time(lambda m: _load(bpk, m, True), args.repeat, model)),
            (
                "nnx load+touch (4 devices)",
                _time(lambda m: _load(bpk, m, True, split), args.repeat, model),
            ),
            (
                "safetensors load+touch",
                _time(lambda m: _load(safetensors, m, True), args.repeat, model),
            ),
        ]
        evict(str(bpk))
        if resident_fraction(str(bpk)) == 0.0:
            rows += [
                ("mmap+touch (cold)", _time(lambda _: _mmap_touch(bpk), args.repeat, _cold(bpk))),
                (
                    "nnx load+touch (cold)",
                    _time(lambda m: _load(bpk, m, True), args.repeat, _cold(bpk, model)),
                ),
            ]
        checks = {
            "burnpack": _aliased(_load(bpk, model(), False), bpk),
            "burnpack, 4 devices": _aliased(_load(bpk, model(), False, split), bpk),
            "safetensors": _aliased(_load(safetensors, model(), False), safetensors),
        }
        reads = _reads(bpk, layers, mesh)
    floor = rows[0][1]
    print(f"{layers} kernels of {WIDTH}x{WIDTH} float32, {size / MIB:,.0f} MiB; median of "
          f"{args.repeat}; jax {jax.__version__}, {os.cpu_count()} CPUs")  # fmt: skip
    print(f"{'row':<30}{'seconds':>10}{'GiB/s':>9}{'x mmap+touch':>14}")
    cold_floor = dict(rows).get("mmap+touch (cold)", floor)
    for name, seconds in rows:
        ratio = seconds / (cold_floor if name.endswith("(cold)") else floor)
        print(f"{name:<30}{seconds:>10.4f}{size / seconds / 2**30:>9.2f}{ratio:>14.2f}")
    for name, (inside, total) in checks.items():
        print(f"{name}: {inside} of {total} arrays alias the mapped file")
    tensor = WIDTH * WIDTH * 4
    parts = sorted({size_read / tensor for size_read in reads})
    print(f"4 devices, rows split: {len(reads)} reads for {layers} kernels, each {parts} of a "
          f"kernel; {sum(reads) / size:.3f} of the file read in all")  # fmt: skip
    return 0


def _reads(path: Path, layers: int, mesh: Mesh) -> list[int]:
    """The size of each read of tensor data a 4-device load makes, at the byte source: one
    per device and kernel, each device's rows alone."""
    sizes: list[int] = []
    read = MmapSource.read

    def counting(self: Any, offset: int, size: int, what: str, tensor: Any = None) -> Any:
        if tensor is not None:
            sizes.append(size)
        return read(self, offset, size, what, tensor)

    MmapSource.read = counting  # type: ignore[method-assign]
    try:
        _load(path, _abstract(layers), False, _rows_split(mesh))
    finally:
        MmapSource.read = read  # type: ignore[method-assign]
    return sizes


if __name__ == "__main__":
    sys.exit(main())
