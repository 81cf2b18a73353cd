"""Save/load benchmarks: weightstore against safetensors and torch, on the same tensors, in one run.

Run ``.venv/bin/python benchmarks/bench_io.py`` (Burn's LargeModel size, 312 MiB) or add
``--quick`` for a seconds-long smoke run. Every timing is the median over ``--repeat`` calls
after one untimed warm-up call (the minimum is shown too). An operation's calls run back to
back unless ``--round-robin`` interleaves them with the other rows of its section.
``ratio`` is a row's median divided by its reference row's (a weightstore row): a peer at
``2.00x`` takes twice our time, one at ``0.50x`` half. See ``benchmarks/README.md``.

Sections:
    save        container writers, with and without fsync (ours fsync inside ``write_file``)
    load-warm   open + materialise every tensor, file in the page cache
    load-cold   the same after evicting the files from the page cache (when eviction works)
    open        header-only open latency, on the large file and on the many-tensor file
    small       many small tensors (default 10,000 x 256 f32): per-tensor overhead
    store       whole torch model: save_into / load_from against the peers' model helpers
    peak        extra resident memory during one save, each in a fresh subprocess

Tensors are materialised by touching one byte in every 4 KiB page (plus the last byte), which
forces a mapped file to be read and costs next to nothing on arrays already in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import datetime
import gc
import json
import math
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

if TYPE_CHECKING:
    import torch

Array = np.ndarray[Any, Any]
Arrays = dict[str, Array]
Tensors = dict[str, "torch.Tensor"]

MIB = 1024**2
GIB = 1024**3
PAGE = 4096  # bytes between touched bytes when materialising a tensor
BURN_INPUT = 1024  # Burn's LargeModel: Linear(1024, 2048), then 19 x Linear(2048, 2048)
BURN_WIDTH = 2048
BURN_LAYERS = 20
QUICK_SIZE_MIB = 4
QUICK_SMALL_COUNT = 500
QUICK_REPEAT = 2
SMALL_ELEMENTS = 256  # f32 values per tensor in the many-small-tensors section
ROUND_ROBIN = False  # set by --round-robin
SECTIONS = ("save", "load-warm", "load-cold", "open", "small", "store", "peak")
TITLES = {
    "save": "SAVE (container writers)",
    "load-warm": "LOAD, warm page cache (open + materialise every tensor)",
    "load-cold": "LOAD, cold page cache (files evicted before each run)",
    "open": "OPEN ONLY (header + index, no tensor data)",
    "small": "MANY SMALL TENSORS (per-tensor overhead)",
    "store": "STORE LEVEL (whole torch model)",
    "peak": "PEAK MEMORY of one save (resident memory above the start, fresh process)",
}


# -- results ------------------------------------------------------------------------------------


@dataclass
class Row:
    """One measured operation: its median time and the weightstore row it is compared with."""

    section: str
    name: str
    seconds: float
    nbytes: int
    ref: str | None = None  # a row of the same section; None: this row is a reference
    note: str = ""
    count: int = 0  # tensors per operation, for the per-tensor column
    samples: list[float] = field(default_factory=list)
    value: float | None = None  # a non-time result (peak memory, MiB)


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)

    def find(self, section: str, name: str) -> Row | None:
        for row in self.rows:
            if row.section == section and row.name == name:
                return row
        return None


@dataclass
class Op:
    """One operation to time. `setup` runs untimed before every call."""

    name: str
    run: Callable[[], object]
    ref: str | None = None
    note: str = ""
    setup: Callable[[], None] | None = None


# -- timing -------------------------------------------------------------------------------------


def _timed(op: Op) -> float:
    if op.setup is not None:
        op.setup()
    gc.collect()
    gc.disable()  # as timeit does: a collection would land on whichever row is running
    try:
        start = time.perf_counter()
        result = op.run()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    del result  # freeing what a loader returned is not charged to it
    return elapsed


def measure(
    report: Report,
    section: str,
    ops: Sequence[Op],
    repeat: int,
    nbytes: int,
    count: int,
) -> None:
    """Time each op: one untimed warm-up call, then `repeat` timed calls.

    By default an op's calls run back to back, so memory one call frees is what the next call
    gets: the rows compare the libraries' own work, not the cost of faulting in fresh pages. With
    ``--round-robin`` every op runs once per round instead, as a fresh process would see memory.
    """
    started = time.perf_counter()
    samples: dict[str, list[float]] = {op.name: [] for op in ops}
    if ROUND_ROBIN:
        for round_index in range(repeat + 1):
            for op in ops:
                elapsed = _timed(op)
                if round_index:
                    samples[op.name].append(elapsed)
    else:
        for op in ops:
            samples[op.name] = [_timed(op) for _ in range(repeat + 1)][1:]
    for op in ops:
        row = Row(section, op.name, statistics.median(samples[op.name]), nbytes, op.ref, op.note,
                  count, samples[op.name])  # fmt: skip
        report.rows.append(row)
    print(f"  {section:<9} {len(ops)} rows in {time.perf_counter() - started:5.1f} s", flush=True)


# -- materialising and files --------------------------------------------------------------------


def touch(array: Array) -> int:
    """Read one byte in every page of a C-contiguous array, forcing mapped data in."""
    flat = array.reshape(-1).view(np.uint8)
    if flat.size == 0:
        return 0
    return int(flat[::PAGE].sum()) + int(flat[-1])


def touch_all(arrays: Mapping[str, Array]) -> int:
    return sum(touch(array) for array in arrays.values())


def touch_torch(tensors: Mapping[str, torch.Tensor]) -> int:
    return sum(touch(tensor.numpy()) for tensor in tensors.values())


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def fsync_path(path: str) -> None:
    """fsync a file, then its directory, as weightstore's atomic save does."""
    for target in (path, os.path.dirname(path) or "."):
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fresh_target(path: str) -> Callable[[], None]:
    """Setup for a save: no file at `path`, and no dirty pages left by the previous save."""

    def setup() -> None:
        remove(path)
        os.sync()

    return setup


def plain_write(path: str, write_to: Callable[[BinaryIO], None]) -> None:
    with open(path, "wb", buffering=0) as file:
        write_to(file)


def synced(save: Callable[[], object], path: str) -> Callable[[], None]:
    """`save`, then fsync of the file and its directory (to compare with our atomic saves)."""

    def run() -> None:
        save()
        fsync_path(path)

    return run


# -- page cache ---------------------------------------------------------------------------------


def resident_fraction(path: str) -> float | None:
    """Fraction of `path`'s pages in the page cache (mincore), or None where unsupported."""
    size = os.path.getsize(path)
    if size == 0 or not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long,
    ]  # fmt: skip
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if address in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        pages = (size + PAGE - 1) // PAGE
        vector = (ctypes.c_ubyte * pages)()
        if libc.mincore(ctypes.c_void_p(address), size, vector) != 0:
            return None
        return sum(byte & 1 for byte in vector) / pages
    finally:
        libc.munmap(ctypes.c_void_p(address), size)


def evict(path: str) -> None:
    """Drop `path` from the page cache: write back, then POSIX_FADV_DONTNEED."""
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_all_caches() -> bool:
    """``echo 3 > /proc/sys/vm/drop_caches``; False without the right (not root, container)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as file:
            file.write("3\n")
    except OSError:
        return False
    return True


def eviction_method(path: str) -> str | None:
    """How this machine can make `path` cold: "fadvise", "drop_caches", or None (it cannot)."""
    if not hasattr(os, "posix_fadvise"):
        return None
    evict(path)
    after = resident_fraction(path)
    if after is not None and after < 0.01:
        return "fadvise"
    if drop_all_caches():
        after = resident_fraction(path)
        if after is not None and after < 0.01:
            return "drop_caches"
    return None


def cpu_steal_ticks() -> int | None:
    """Total CPU steal ticks so far (time the hypervisor gave our vCPUs to someone else)."""
    with contextlib.suppress(OSError, IndexError, ValueError), open("/proc/stat") as stat:
        return int(stat.readline().split()[8])
    return None


# -- the workload -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """A stack of Linear layers: Burn's LargeModel at the default size, narrower when small."""

    input: int
    width: int
    layers: int

    @classmethod
    def for_size(cls, size_mib: float) -> ModelShape:
        first = (BURN_INPUT * BURN_WIDTH + BURN_WIDTH) * 4
        per_layer = (BURN_WIDTH * BURN_WIDTH + BURN_WIDTH) * 4
        if size_mib * MIB >= first + per_layer:  # Burn's layers, as many as fit
            layers = 1 + round((size_mib * MIB - first) / per_layer)
            return cls(BURN_INPUT, BURN_WIDTH, layers)
        # Burn's 20 layers, narrower: width^2 * 4 bytes * 20 layers ~ size.
        width = max(16, int((size_mib * MIB / (4 * BURN_LAYERS)) ** 0.5) // 16 * 16)
        return cls(width // 2, width, BURN_LAYERS)

    def shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        out: list[tuple[str, tuple[int, ...]]] = []
        for i in range(self.layers):
            fan_in = self.input if i == 0 else self.width
            out.append((f"layers.{i}.weight", (self.width, fan_in)))
            out.append((f"layers.{i}.bias", (self.width,)))
        return out

    @property
    def nbytes(self) -> int:
        return sum(math.prod(dims) * 4 for _, dims in self.shapes())

    @property
    def largest(self) -> int:
        return max(math.prod(dims) * 4 for _, dims in self.shapes())


def make_model(shape: ModelShape, seed: int = 42) -> torch.nn.Module:
    """Xavier-uniform weights and zero biases, as Burn's benchmark generator makes them."""
    import torch

    layers = [
        torch.nn.Linear(shape.input if i == 0 else shape.width, shape.width)
        for i in range(shape.layers)
    ]
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(layers)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for layer in layers:
            rows, cols = layer.weight.shape
            bound = np.float32(np.sqrt(6.0 / (rows + cols)))
            values = (rng.random((rows, cols), dtype=np.float32) * 2 - 1) * bound
            layer.weight.copy_(torch.from_numpy(values))
            layer.bias.zero_()
    return model


def make_small(count: int) -> Arrays:
    rng = np.random.default_rng(7)
    return {
        f"blocks.{i}.weight": rng.random(SMALL_ELEMENTS, dtype=np.float32) for i in range(count)
    }


def entries_of(arrays: Arrays) -> list[Any]:
    from weightstore.entry import TensorEntry

    return [TensorEntry.from_array(name, array) for name, array in arrays.items()]


@dataclass(frozen=True)
class Files:
    """The same tensors in the three formats."""

    burnpack: str
    safetensors: str
    torch: str


def write_files(arrays: Arrays, tensors: Tensors, stem: str) -> Files:
    import torch

    from weightstore import burnpack
    from weightstore import safetensors as ws_safetensors

    files = Files(f"{stem}.bpk", f"{stem}.safetensors", f"{stem}.pt")
    for path in (files.burnpack, files.safetensors, files.torch):
        remove(path)
    burnpack.write_file(files.burnpack, entries_of(arrays))
    ws_safetensors.write_file(files.safetensors, entries_of(arrays))
    torch.save(dict(tensors), files.torch)
    return files


# -- operations ---------------------------------------------------------------------------------


BP_FILE, BP_STREAM = "ws.burnpack write_file", "ws.burnpack write_to"
BP_LOAD = "ws.burnpack reader (mmap)"
BP_OPEN = "ws.burnpack open"


def save_ops(arrays: Arrays, tensors: Tensors, path: str) -> list[Op]:
    """Every container writer on the same tensors, into `path`."""
    import safetensors.numpy
    import safetensors.torch
    import torch

    from weightstore import burnpack
    from weightstore import safetensors as ws_safetensors

    blob = b"".join(array.tobytes() for array in arrays.values())

    def raw(sync: bool) -> Callable[[], None]:
        def run() -> None:
            with open(path, "wb", buffering=0) as file:
                file.write(blob)
                if sync:
                    os.fsync(file.fileno())

        return run

    def ws_bp_file() -> object:
        return burnpack.write_file(path, entries_of(arrays), auto_extension=False)

    def ws_bp_stream() -> None:
        plain_write(path, burnpack.BurnpackWriter(entries_of(arrays)).write_to)

    def ws_st_file() -> object:
        return ws_safetensors.write_file(path, entries_of(arrays))

    def ws_st_stream() -> None:
        plain_write(path, ws_safetensors.SafetensorsWriter(entries_of(arrays)).write_to)

    def st_np() -> None:
        safetensors.numpy.save_file(arrays, path)

    def st_pt() -> None:
        safetensors.torch.save_file(tensors, path)

    def pt() -> None:
        torch.save(tensors, path)

    setup = fresh_target(path)
    return [
        Op("baseline: write", raw(False), BP_STREAM, "open().write() of the same bytes", setup),
        Op("baseline: write+fsync", raw(True), BP_FILE, "file fsync only", setup),
        Op(BP_FILE, ws_bp_file, None, "fsync file+dir, atomic rename (reference)", setup),
        Op(BP_STREAM, ws_bp_stream, None, "no fsync, plain open() (reference)", setup),
        Op("ws.safetensors write_file", ws_st_file, BP_FILE, "fsync file+dir, atomic", setup),
        Op("ws.safetensors write_to", ws_st_stream, BP_STREAM, "no fsync", setup),
        Op("st.numpy.save_file", st_np, BP_STREAM, "no fsync", setup),
        Op("st.numpy.save_file+fsync", synced(st_np, path), BP_FILE, "+fsync file+dir", setup),
        Op("st.torch.save_file", st_pt, BP_STREAM, "no fsync", setup),
        Op("st.torch.save_file+fsync", synced(st_pt, path), BP_FILE, "+fsync file+dir", setup),
        Op("torch.save", pt, BP_STREAM, "no fsync", setup),
        Op("torch.save+fsync", synced(pt, path), BP_FILE, "+fsync file+dir", setup),
    ]


def load_ops(files: Files, cold: bool) -> list[Op]:
    """Every reader: open, take every tensor as an array, touch every page."""
    import safetensors.numpy
    import safetensors.torch
    import torch

    import safetensors
    from weightstore import BurnpackReader
    from weightstore.safetensors import SafetensorsReader

    def evicting(*paths: str) -> Callable[[], None] | None:
        if not cold:
            return None

        def setup() -> None:
            for path in paths:
                evict(path)

        return setup

    def baseline_fromfile() -> Array:
        data = np.fromfile(files.burnpack, dtype=np.uint8)
        touch(data)
        return data

    size = os.path.getsize(files.burnpack)

    def baseline_fresh_numpy() -> Array:
        fresh = np.empty(size, dtype=np.uint8)
        fresh[::PAGE] = 1
        return fresh

    def baseline_fresh_bytearray() -> bytearray:
        return bytearray(size)

    prefaulted = bytearray(size)
    prefaulted[::PAGE] = bytes(len(prefaulted[::PAGE]))

    def baseline_readinto() -> None:
        with open(files.burnpack, "rb", buffering=0) as file:
            view = memoryview(prefaulted)
            while view.nbytes:
                got = file.readinto(view)
                if not got:
                    break
                view = view[got:]

    def baseline_mmap() -> int:
        with open(files.burnpack, "rb") as file, mmap.mmap(
            file.fileno(), 0, access=mmap.ACCESS_READ
        ) as mapped:  # fmt: skip
            array = np.frombuffer(mapped, dtype=np.uint8)
            total = touch(array)
            del array
            return total

    def ws_bp(mode: Any, file_order: bool = False) -> Callable[[], Arrays]:
        def run() -> Arrays:
            with BurnpackReader.from_file(files.burnpack, mode=mode) as reader:
                names = reader.names()  # sorted by name, as a user iterating the reader sees them
                if file_order:
                    names.sort(key=lambda name: reader.descriptor(name).data_offsets)
                arrays = {name: reader.get(name) for name in names}
            touch_all(arrays)
            return arrays

        return run

    def ws_st(mode: Any) -> Callable[[], Arrays]:
        def run() -> Arrays:
            with SafetensorsReader.from_file(files.safetensors, mode=mode) as reader:
                arrays = {name: reader.get(name) for name in reader.names()}
            touch_all(arrays)
            return arrays

        return run

    def st_np() -> Arrays:
        arrays: Arrays = safetensors.numpy.load_file(files.safetensors)
        touch_all(arrays)
        return arrays

    def st_open() -> Arrays:
        with safetensors.safe_open(files.safetensors, framework="np") as opened:
            arrays = {name: opened.get_tensor(name) for name in opened.keys()}  # noqa: SIM118
        touch_all(arrays)
        return arrays

    def st_pt() -> Tensors:
        tensors: Tensors = safetensors.torch.load_file(files.safetensors)
        touch_torch(tensors)
        return tensors

    def pt(mapped: bool) -> Callable[[], Tensors]:
        def run() -> Tensors:
            tensors: Tensors = torch.load(files.torch, mmap=mapped)
            touch_torch(tensors)
            return tensors

        return run

    bp, st, tp = evicting(files.burnpack), evicting(files.safetensors), evicting(files.torch)
    ops = [
        Op("baseline: np.fromfile", baseline_fromfile, BP_LOAD, "read into a fresh buffer", bp),
        Op("baseline: readinto (pre-faulted)", baseline_readinto, BP_LOAD, "copy-bound", bp),
        Op("baseline: fresh np.empty, touched", baseline_fresh_numpy, BP_LOAD,
           "page faults only (numpy asks for huge pages)"),
        Op("baseline: fresh bytearray(n)", baseline_fresh_bytearray, BP_LOAD,
           "page faults + zero fill, 4 KiB pages"),
        Op("baseline: mmap+touch", baseline_mmap, BP_LOAD, "zero-copy lower bound", bp),
        Op(BP_LOAD, ws_bp("mmap"), None, "views; names() order (reference)", bp),
        Op("ws.burnpack reader (mmap, file order)", ws_bp("mmap", True), BP_LOAD,
           "views; data-offset order", bp),
        Op("ws.burnpack reader (pread)", ws_bp("pread"), BP_LOAD, "a copy per tensor", bp),
        Op("ws.safetensors reader (mmap)", ws_st("mmap"), BP_LOAD, "views", st),
        Op("ws.safetensors reader (pread)", ws_st("pread"), BP_LOAD, "a copy per tensor", st),
        Op("st.numpy.load_file", st_np, BP_LOAD, "copies", st),
        Op("st.safe_open(np)", st_open, BP_LOAD, "get_tensor per name; copies", st),
        Op("st.torch.load_file", st_pt, BP_LOAD, "mmap-backed tensors", st),
        Op("torch.load(mmap=True)", pt(True), BP_LOAD, "", tp),
        Op("torch.load", pt(False), BP_LOAD, "", tp),
    ]  # fmt: skip
    return [op for op in ops if not (cold and "fresh" in op.name)]  # no file, nothing to evict


def open_ops(files: Files, label: str) -> list[Op]:
    """Read the header and build the index; no tensor data is touched."""
    import torch

    import safetensors
    from weightstore import BurnpackReader
    from weightstore.safetensors import SafetensorsReader

    def ws_bp() -> int:
        with BurnpackReader.from_file(files.burnpack) as reader:
            return len(reader)

    def ws_st() -> int:
        with SafetensorsReader.from_file(files.safetensors) as reader:
            return len(reader)

    def st_open(framework: str) -> Callable[[], int]:
        def run() -> int:
            with safetensors.safe_open(files.safetensors, framework=framework) as opened:
                return len(opened.keys())

        return run

    def pt_mmap() -> object:
        return torch.load(files.torch, mmap=True)

    ref = f"{BP_OPEN} [{label}]"
    return [
        Op(ref, ws_bp, None, "(reference)"),
        Op(f"ws.safetensors open [{label}]", ws_st, ref),
        Op(f"st.safe_open(np) + keys [{label}]", st_open("np"), ref),
        Op(f"st.safe_open(pt) + keys [{label}]", st_open("pt"), ref),
        Op(f"torch.load(mmap=True) [{label}]", pt_mmap, ref, "builds every tensor, reads none"),
    ]


def store_save_ops(model: torch.nn.Module, work: str) -> list[Op]:
    import safetensors.torch
    import torch

    from weightstore import BurnpackStore, SafetensorsStore, save_into

    bpk, st, pt = (os.path.join(work, f"store.{ext}") for ext in ("bpk", "safetensors", "pt"))
    ref = "save_into(BurnpackStore)"

    def st_save() -> None:
        safetensors.torch.save_model(model, st)

    def pt_save() -> None:
        torch.save(model.state_dict(), pt)

    return [
        Op(ref, lambda: save_into(model, BurnpackStore.from_file(bpk)), None,
           "fsync file+dir (reference)", fresh_target(bpk)),
        Op("save_into(SafetensorsStore)", lambda: save_into(model, SafetensorsStore.from_file(st)),
           ref, "fsync file+dir", fresh_target(st)),
        Op("st.torch.save_model", st_save, ref, "NO fsync: not like-for-like", fresh_target(st)),
        Op("st.torch.save_model+fsync", synced(st_save, st), ref, "+fsync file+dir",
           fresh_target(st)),
        Op("torch.save(state_dict)", pt_save, ref, "NO fsync: not like-for-like",
           fresh_target(pt)),
        Op("torch.save(state_dict)+fsync", synced(pt_save, pt), ref, "+fsync file+dir",
           fresh_target(pt)),
    ]  # fmt: skip


def store_load_ops(model: torch.nn.Module, target: torch.nn.Module, work: str) -> list[Op]:
    import safetensors.torch
    import torch

    from weightstore import BurnpackStore, SafetensorsStore, load_from

    bpk, st, pt = (os.path.join(work, f"store.{ext}") for ext in ("bpk", "safetensors", "pt"))
    ref = "load_from(BurnpackStore)"
    source = {name: tensor.clone() for name, tensor in model.state_dict().items()}

    def copy_baseline() -> None:
        with torch.no_grad():
            for name, tensor in target.state_dict().items():
                tensor.copy_(source[name])

    return [
        Op("baseline: param.copy_(in-memory)", copy_baseline, ref, "memcpy-bound"),
        Op(ref, lambda: load_from(target, BurnpackStore.from_file(bpk)), None, "(reference)"),
        Op("load_from(SafetensorsStore)",
           lambda: load_from(target, SafetensorsStore.from_file(st)), ref),
        Op("st.torch.load_model", lambda: safetensors.torch.load_model(target, st), ref),
        Op("torch.load + load_state_dict", lambda: target.load_state_dict(torch.load(pt)), ref),
        Op("torch.load(mmap=True) + load_state_dict",
           lambda: target.load_state_dict(torch.load(pt, mmap=True)), ref),
    ]  # fmt: skip


# -- sections -----------------------------------------------------------------------------------


def run_small(report: Report, count: int, work: str, repeat: int) -> Files:
    import torch

    arrays = make_small(count)
    tensors = {name: torch.from_numpy(array) for name, array in arrays.items()}
    nbytes = count * SMALL_ELEMENTS * 4
    path = os.path.join(work, "small-target")
    keep = {BP_STREAM, BP_FILE, "ws.safetensors write_to", "st.numpy.save_file",
            "st.torch.save_file", "torch.save"}  # fmt: skip
    saves = [
        Op(f"save: {op.name}", op.run, None if op.ref is None else f"save: {op.ref}", op.note,
           op.setup)
        for op in save_ops(arrays, tensors, path)
        if op.name in keep
    ]  # fmt: skip
    measure(report, "small", saves, repeat, nbytes, count)
    remove(path)
    files = write_files(arrays, tensors, os.path.join(work, "small"))
    loads = [
        Op(f"load: {op.name}", op.run, None if op.ref is None else f"load: {op.ref}", op.note)
        for op in load_ops(files, cold=False)
        if not op.name.startswith("baseline") and "file order" not in op.name
    ]
    measure(report, "small", loads, repeat, nbytes, count)
    return files


def run_store(report: Report, model: torch.nn.Module, shape: ModelShape, work: str,
              repeat: int) -> None:  # fmt: skip
    import torch

    nbytes, count = shape.nbytes, 2 * shape.layers
    measure(report, "store", store_save_ops(model, work), repeat, nbytes, count)
    target = make_model(shape, seed=1)
    measure(report, "store", store_load_ops(model, target, work), repeat, nbytes, count)
    for a, b in zip(model.state_dict().values(), target.state_dict().values(), strict=True):
        if not torch.equal(a, b):
            raise AssertionError("a store round trip changed a tensor")
    for ext in ("bpk", "safetensors", "pt"):
        remove(os.path.join(work, f"store.{ext}"))


# -- peak memory (subprocesses) -----------------------------------------------------------------

PEAK_METHODS = (
    "ws.burnpack write_file (arrays in memory)",
    "ws.burnpack write_file (deferred producers)",
    "ws.safetensors write_file (arrays in memory)",
    "ws save_into(BurnpackStore) (torch model)",
    "st.numpy.save_file (arrays in memory)",
    "st.torch.save_file (tensors in memory)",
    "torch.save (tensors in memory)",
)


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field_name} not in /proc/self/status")


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return False
    return True


def _producer(dims: tuple[int, ...]) -> Callable[[], Array]:
    """Deferred data: a fresh array made only when the writer asks for it."""
    return lambda: np.full(dims, 0.5, dtype=np.float32)


def peak_child(method: str, size_mib: float, work: str) -> dict[str, Any]:
    """Run one save in this (fresh) process; report resident memory above the starting point."""
    from weightstore import BurnpackStore, burnpack, save_into
    from weightstore import safetensors as ws_safetensors
    from weightstore.dtypes import from_numpy
    from weightstore.entry import TensorEntry

    shape = ModelShape.for_size(size_mib)
    path = os.path.join(work, f"peak-{PEAK_METHODS.index(method)}")
    f32 = from_numpy(np.dtype(np.float32))
    arrays: Arrays = {}
    tensors: dict[str, Any] = {}
    model: Any = None
    if "torch" in method:  # only these children pay for importing torch
        import safetensors.torch
        import torch

        if "model" in method:
            model = make_model(shape)
        else:
            tensors = {name: torch.full(dims, 0.5) for name, dims in shape.shapes()}
    elif "deferred" not in method:
        import safetensors.numpy

        arrays = {name: np.full(dims, 0.5, dtype=np.float32) for name, dims in shape.shapes()}
    saves: dict[str, Callable[[], object]] = {
        PEAK_METHODS[0]: lambda: burnpack.write_file(path, entries_of(arrays)),
        PEAK_METHODS[1]: lambda: burnpack.write_file(path, [
            TensorEntry(name, f32, dims, _producer(dims)) for name, dims in shape.shapes()
        ]),
        PEAK_METHODS[2]: lambda: ws_safetensors.write_file(path, entries_of(arrays)),
        PEAK_METHODS[3]: lambda: save_into(model, BurnpackStore.from_file(path)),
        PEAK_METHODS[4]: lambda: safetensors.numpy.save_file(arrays, path),
        PEAK_METHODS[5]: lambda: safetensors.torch.save_file(tensors, path),
        PEAK_METHODS[6]: lambda: torch.save(tensors, path),
    }  # fmt: skip
    gc.collect()
    before = _status_kib("VmRSS")
    exact = _reset_peak()
    saves[method]()
    peak = _status_kib("VmHWM")
    for leftover in os.listdir(work):
        if leftover.startswith(os.path.basename(path)):
            remove(os.path.join(work, leftover))
    return {
        "extra_mib": (peak - before) / 1024,
        "model_mib": shape.nbytes / MIB,
        "largest_mib": shape.largest / MIB,
        "exact": exact,
    }


def run_peak(report: Report, size_mib: float, work: str) -> None:
    started = time.perf_counter()

    def child(method: str) -> dict[str, Any]:
        command = [sys.executable, os.path.abspath(__file__), "--peak-child", method,
                   "--size-mib", str(size_mib), "--dir", work]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"peak child {method!r} failed:\n{done.stderr}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    with ThreadPoolExecutor(max_workers=2) as pool:  # memory is per process: safe in parallel
        results = list(pool.map(child, PEAK_METHODS))
    for method, result in zip(PEAK_METHODS, results, strict=True):
        model, largest = result["model_mib"], result["largest_mib"]
        note = f"model {model:.1f} MiB, largest tensor {largest:.1f} MiB"
        if not result["exact"]:
            note += "; VmHWM not resettable: an upper bound"
        report.rows.append(Row("peak", method, 0.0, 0, None, note, value=result["extra_mib"]))
    print(f"  peak      {len(PEAK_METHODS)} rows in {time.perf_counter() - started:5.1f} s")


# -- output -------------------------------------------------------------------------------------


def ratio_of(report: Report, row: Row) -> str:
    if row.ref is None:
        return "ref"
    reference = report.find(row.section, row.ref)
    if reference is None or reference.seconds <= 0:
        return "?"
    return f"{row.seconds / reference.seconds:.2f}x"


def render(report: Report) -> str:
    lines = []
    for section in SECTIONS:
        rows = [row for row in report.rows if row.section == section]
        if not rows:
            continue
        lines += ["", f"== {TITLES[section]}"]
        if section == "peak":
            lines.append(f"{'operation':<48} {'extra RSS':>10}  note")
            lines += [f"{r.name:<48} {r.value or 0.0:>6.1f} MiB  {r.note}" for r in rows]
            continue
        per_tensor = section in ("small", "open")
        lines.append(
            f"{'operation':<48} {'median':>10} {'min':>10} {'GiB/s':>7} {'ratio':>7}"
            + (f" {'us/tensor':>9}" if per_tensor else "")
            + "  note"
        )
        for row in rows:
            speed = f"{row.nbytes / GIB / row.seconds:7.2f}" if row.nbytes else f"{'-':>7}"
            fastest = min(row.samples, default=row.seconds)
            line = (
                f"{row.name:<48} {row.seconds * 1e3:7.2f} ms {fastest * 1e3:7.2f} ms {speed} "
                f"{ratio_of(report, row):>7}"
            )
            if per_tensor:
                line += f" {row.seconds / max(row.count, 1) * 1e6:9.2f}"
            lines.append(line + (f"  {row.note}" if row.note else ""))
    lines += [
        "",
        "ratio = this row's median / its reference row's (a weightstore row, marked ref):",
        ">1 means this row is slower than ours, <1 faster. GiB/s: tensor bytes / median time.",
    ]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)


def environment(args: argparse.Namespace, work: str, shape: ModelShape) -> dict[str, Any]:
    import torch

    import safetensors
    import weightstore

    filesystem = "?"
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        best = ""
        for line in mounts:
            parts = line.split()
            if len(parts) > 2 and work.startswith(parts[1]) and len(parts[1]) >= len(best):
                best, filesystem = parts[1], f"{parts[2]} on {parts[1]}"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "safetensors": safetensors.__version__,
        "weightstore": weightstore.__version__,
        "filesystem": filesystem,
        "size_mib": round(shape.nbytes / MIB, 1),
        "model": f"{shape.layers} x Linear (first {shape.input}->{shape.width}, "
        f"then {shape.width}->{shape.width})",
        "tensors": 2 * shape.layers,
        "repeat": args.repeat,
        "order": "round-robin" if args.round_robin else "back-to-back",
        "small_count": args.small_count,
    }


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time weightstore's save/load against safetensors and torch.save/load."
    )
    parser.add_argument(
        "--size-mib",
        type=float,
        default=312.0,
        help="model size; 312 is Burn's LargeModel (20 Linear layers)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (median reported)")
    parser.add_argument(
        "--small-count",
        type=int,
        default=10_000,
        help="tensors in the many-small-tensors section (256 f32 each)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_SIZE_MIB} MiB, {QUICK_SMALL_COUNT} small "
        f"tensors, {QUICK_REPEAT} timed calls per row",
    )
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections to run: {', '.join(SECTIONS)}",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every row as JSON here")
    parser.add_argument("--dir", help="scratch directory (default: a fresh one in $TMPDIR)")
    parser.add_argument(
        "--round-robin",
        action="store_true",
        help="interleave the rows of a section instead of timing each row's calls back to back",
    )
    parser.add_argument("--peak-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)  # fmt: skip
    if args.quick:
        args.size_mib, args.small_count, args.repeat = (
            QUICK_SIZE_MIB, QUICK_SMALL_COUNT, QUICK_REPEAT,
        )  # fmt: skip
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    return args


@contextlib.contextmanager
def scratch(directory: str | None) -> Iterator[str]:
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
        yield os.path.abspath(directory)
        return
    work = tempfile.mkdtemp(prefix="weightstore-bench-")
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(args: argparse.Namespace, work: str, report: Report) -> None:
    import torch

    sections = set(args.only.split(","))
    shape = ModelShape.for_size(args.size_mib)
    report.environment = environment(args, work, shape)
    print("weightstore I/O benchmark: " + json.dumps(report.environment), flush=True)
    model = make_model(shape)
    tensors = dict(model.state_dict())
    arrays = {name: tensor.numpy() for name, tensor in tensors.items()}  # views, no copy
    count = len(arrays)
    gc.collect()
    gc.freeze()  # torch's ~170k import-time objects: keep them out of every collection
    if "save" in sections:
        path = os.path.join(work, "save-target")
        measure(report, "save", save_ops(arrays, tensors, path), args.repeat, shape.nbytes, count)
        remove(path)
    files = write_files(arrays, tensors, os.path.join(work, "model"))
    if "load-warm" in sections:
        measure(report, "load-warm", load_ops(files, cold=False), args.repeat, shape.nbytes,
                count)  # fmt: skip
    if "load-cold" in sections:
        method = eviction_method(files.burnpack)
        if method is None:
            report.notes.append("load-cold skipped: the page cache could not be dropped here")
        else:
            report.notes.append(
                f"load-cold: files evicted with {method} before every run (checked with "
                "mincore); on a VM the host may still cache the disk"
            )
            measure(report, "load-cold", load_ops(files, cold=True), args.repeat, shape.nbytes,
                    count)  # fmt: skip
    small_files = None
    if "small" in sections:
        small_files = run_small(report, args.small_count, work, args.repeat)
    if "open" in sections:
        if small_files is None:
            small = make_small(args.small_count)
            small_files = write_files(small, {n: torch.from_numpy(a) for n, a in small.items()},
                                      os.path.join(work, "small"))  # fmt: skip
        open_repeat = max(10, 4 * args.repeat)
        for label, opened, n in (
            (f"{count} tensors", files, count),
            (f"{args.small_count} tensors", small_files, args.small_count),
        ):
            measure(report, "open", open_ops(opened, label), open_repeat, 0, n)  # fmt: skip
    if "store" in sections:
        run_store(report, model, shape, work, args.repeat)
    if "peak" in sections:
        run_peak(report, args.size_mib, work)


def main(argv: list[str] | None = None) -> int:
    global ROUND_ROBIN
    args = parse_args(argv)
    ROUND_ROBIN = args.round_robin
    if args.peak_child:
        print(json.dumps(peak_child(args.peak_child, args.size_mib, args.dir)))
        return 0
    report = Report()
    started, steal_before = time.perf_counter(), cpu_steal_ticks()
    with scratch(args.dir) as work:
        run_all(args, work, report)
    elapsed = time.perf_counter() - started
    steal_after = cpu_steal_ticks()
    report.notes.append("load-warm: the untimed warm-up call puts every file in the page cache")
    report.notes.append(
        "timing order: "
        + (
            "round-robin over each section's rows"
            if ROUND_ROBIN
            else "each row's calls back to back"
        )
    )
    if steal_before is not None and steal_after is not None:
        ticks = os.sysconf("SC_CLK_TCK") * elapsed * (os.cpu_count() or 1)
        report.notes.append(
            f"CPU steal during the run: {100 * (steal_after - steal_before) / ticks:.1f}% "
            "(time the hypervisor ran someone else on our vCPUs)"
        )
    report.notes.append(f"total benchmark time {elapsed:.0f} s")
    print(render(report))
    if args.json:
        rows = [asdict(row) | {"ratio": ratio_of(report, row)} for row in report.rows]
        with open(args.json, "w") as out:
            json.dump({"environment": report.environment, "notes": report.notes, "rows": rows},
                      out, indent=2)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
