"""The rows of issue 12: weightstore's user-facing paths against their closest peers.

Run ``.venv/bin/python benchmarks/bench_paths.py`` (a 433 MB model, several minutes) or add
``--quick`` for a small model and a seconds-long smoke run. Every timed call runs in a fresh
Python process, because import cost and first-call cost are what several rows are about; the
weightstore call and its peer alternate (ours, peer, ours, peer, ...) so that a busy machine
slows both alike, and each row reports the median and minimum of ``--repeat`` pairs after one
untimed warm-up pair (none with ``--quick``). ``ratio`` = our median / the peer's median:
below 1 we are faster.

A child measures itself (``time.perf_counter`` around the measured part only, after building
the model and importing what is not being measured) and prints ``{"seconds": ...}`` as its
last line. Rows 7 and 12 time whole command-line processes from the parent instead, and row 12
also reports each process's peak resident memory (``ru_maxrss`` from ``wait4``).

The model is the issue's: ``Embedding(32000, 1024)`` and 12 blocks of ``Linear(1024, 3072)``,
``Linear(3072, 1024)``, ``LayerNorm(1024)``, float32: 108,339,200 values, 433.4 MB (the issue
says "~825 MB", which this shape does not give; the rows follow the shape). It is built once in
torch at start and saved by ``safetensors.torch.save_file``, ``torch.save`` and weightstore's
burnpack store. See ``benchmarks/README.md`` for what each row compares.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench_io import drop_all_caches, evict, eviction_method
from bench_proc import run_with_peak_rss

MB = 1000**2
QUICK_REPEAT = 1  # pairs per row in --quick, which also skips the warm-up pair: each child
DEFAULT_REPEAT = 5  # imports torch (about 2 s on the 2-core VM), so a smoke run stays near 1 min
CHILD_TIMEOUT_S = 600  # one child: the largest runs a whole 433 MB convert with fsync


@dataclass(frozen=True)
class ModelShape:
    """The issue's model family: an embedding, then `layers` blocks of up, down and norm."""

    vocab: int
    hidden: int
    ffn: int
    layers: int
    small_count: int  # tensors in the many-small-tensors file (row 6)

    def numel(self) -> int:
        block = 2 * self.hidden * self.ffn + self.ffn + self.hidden + 2 * self.hidden
        return self.vocab * self.hidden + self.layers * block

    def largest_tensor_size(self) -> int:
        """Bytes of the largest tensor (f32): the embedding, or a block's weight."""
        return 4 * max(self.vocab * self.hidden, self.hidden * self.ffn)


FULL_SHAPE = ModelShape(vocab=32000, hidden=1024, ffn=3072, layers=12, small_count=20_000)
QUICK_SHAPE = ModelShape(vocab=1000, hidden=64, ffn=192, layers=2, small_count=500)
SMALL_SIDE = 16  # the small tensors are 16 x 16 f32

# Defines `Model` and `build(shape, device)` in the parent and in every child that needs a
# model; a string so that children need not import this script (and numpy with it).
MODEL_CODE = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, hidden, ffn):
            super().__init__()
            self.up = nn.Linear(hidden, ffn)
            self.down = nn.Linear(ffn, hidden)
            self.norm = nn.LayerNorm(hidden)

    class Model(nn.Module):
        def __init__(self, vocab, hidden, ffn, layers):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(Block(hidden, ffn) for _ in range(layers))

    def build(shape, device="cpu"):
        # A built model: memory allocated and written (zeros), as a model would be before
        # a load; random init would only slow the children down.
        with torch.device("meta"):
            model = Model(*shape)
        if device == "meta":
            return model
        model = model.to_empty(device=device)
        with torch.no_grad():
            for tensor in model.state_dict().values():
                tensor.zero_()
        return model
    """
)

# Every child starts with this: argv[1] is a JSON object of paths and the shape.
CHILD_PRELUDE = textwrap.dedent(
    """
    import json, os, sys, time
    ARGS = json.loads(sys.argv[1])
    """
)
CHILD_REPORT = '\nprint(json.dumps({"seconds": time.perf_counter() - START}))\n'


def child_program(setup: str, measured: str, *, model: str | None = None) -> str:
    """A child's source: prelude, optional model build (`model` is "cpu" or "meta"), the
    untimed `setup`, then `measured` between two clock reads."""
    parts = [CHILD_PRELUDE]
    if model is not None:
        parts += [MODEL_CODE, f"model = build(ARGS['shape'], {model!r})\n"]
    parts += [
        textwrap.dedent(setup),
        "START = time.perf_counter()\n",
        textwrap.dedent(measured),
        CHILD_REPORT,
    ]
    return "".join(parts)


# -- the rows -------------------------------------------------------------------------------------


@dataclass
class Side:
    """One side of a row: how to run it, and what it measured."""

    label: str
    program: str | None = None  # Python source run with `python -c`, timing itself
    command: Callable[[Files], list[str]] | None = None  # else a whole process, timed outside
    seconds: list[float] = field(default_factory=list)
    peak_rss: list[int] = field(default_factory=list)  # bytes, ru_maxrss of the process


@dataclass
class RowSpec:
    """A row of the issue's table: our side, the peer's, and what runs before each call."""

    number: int
    key: str
    title: str
    target: str  # the target for the ratio
    ours: Side
    peer: Side
    before_ours: Callable[[Files], None] | None = None  # untimed, before every call of ours
    before_peer: Callable[[Files], None] | None = None
    report_rss: bool = False
    skipped: str | None = None  # why the row did not run


@dataclass(frozen=True)
class Files:
    """The model's files, written once at start, and the scratch outputs of the save rows."""

    directory: str
    shape: ModelShape
    safetensors: str
    pt: str
    bpk: str
    small: str
    save_ours: str
    save_peer: str
    convert_ours: str
    convert_peer: str

    def args(self) -> str:
        """The JSON object children read as ARGS."""
        document = {name: value for name, value in asdict(self).items() if name != "shape"}
        shape = self.shape
        document["shape"] = [shape.vocab, shape.hidden, shape.ffn, shape.layers]
        return json.dumps(document)


def _remove(path: str) -> Callable[[Files], None]:
    """Before a save: no file at `path`, and the previous save's dirty pages written back."""

    def run(_: Files) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.sync()

    return run


def _console(name: str) -> str:
    """A console script installed beside this interpreter (``weightstore``)."""
    script = os.path.join(os.path.dirname(sys.executable), name)
    return script if os.path.exists(script) else shutil.which(name) or name


LOAD_WS = """
from weightstore import SafetensorsStore, load_from
"""
LOAD_ST = """
from safetensors.torch import load_file
"""
FSYNC_BOTH = """
def fsync_path(path):
    for target in (path, os.path.dirname(path) or "."):
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
"""
INSPECT_PEER = textwrap.dedent(
    """
    import json, sys
    from safetensors import safe_open
    with safe_open(sys.argv[1], framework="np") as f:
        rows = []
        for name in f.keys():
            part = f.get_slice(name)
            rows.append({"name": name, "dtype": part.get_dtype(), "shape": part.get_shape()})
    print(json.dumps(rows))
    """
)
CONVERT_PEER = textwrap.dedent(
    """
    import os, sys, torch
    from safetensors.torch import save_file
    src, dst = sys.argv[1], sys.argv[2]
    save_file(torch.load(src, mmap=True, weights_only=True), dst)
    for target in (dst, os.path.dirname(dst) or "."):  # weightstore's convert fsyncs both
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    """
)


def row_specs(files: Files, cold_method: str | None) -> list[RowSpec]:
    """The issue's twelve rows, in its order."""
    rows = [
        RowSpec(
            1, "import", "import, torch already imported", "<= 5x",
            Side("from weightstore import SafetensorsStore, load_from",
                 child_program("import torch\n", LOAD_WS)),
            Side("from safetensors.torch import load_file",
                 child_program("import torch\n", LOAD_ST)),
        ),
        RowSpec(
            2, "import-load", "import + load into a built model, warm", "<= 1.0x",
            Side("import + load_from(SafetensorsStore)", child_program(
                "", LOAD_WS + "load_from(model, SafetensorsStore.from_file(ARGS['safetensors']))",
                model="cpu")),
            Side("import + load_state_dict(load_file())", child_program(
                "", LOAD_ST + "model.load_state_dict(load_file(ARGS['safetensors']))",
                model="cpu")),
        ),
        RowSpec(
            3, "load", "load alone, warm", "<= 1.0x",
            Side("load_from(model, SafetensorsStore)", child_program(
                LOAD_WS, "load_from(model, SafetensorsStore.from_file(ARGS['safetensors']))",
                model="cpu")),
            Side("load_state_dict(load_file())", child_program(
                LOAD_ST, "model.load_state_dict(load_file(ARGS['safetensors']))", model="cpu")),
        ),
        RowSpec(
            4, "meta", "load into a meta-device model", "<= 1.0x",
            Side("load_from(meta model, SafetensorsStore)", child_program(
                LOAD_WS, "load_from(model, SafetensorsStore.from_file(ARGS['safetensors']))",
                model="meta")),
            Side("load_state_dict(load_file(), assign=True)", child_program(
                LOAD_ST, "model.load_state_dict(load_file(ARGS['safetensors']), assign=True)",
                model="meta")),
        ),
        RowSpec(
            5, "pt", "PytorchStore load of the torch.save file", "<= 1.0x",
            Side("load_from(model, PytorchStore)", child_program(
                "from weightstore import PytorchStore, load_from\n",
                "load_from(model, PytorchStore.from_file(ARGS['pt']))", model="cpu")),
            Side("load_state_dict(torch.load(mmap, weights_only))", child_program(
                "", "model.load_state_dict(torch.load(ARGS['pt'], mmap=True, weights_only=True))",
                model="cpu")),
        ),
        RowSpec(
            6, "small", f"{files.shape.small_count:,} tensors of 16x16 f32: open + read each",
            "<= 0.5x",
            Side("SafetensorsReader + get each", child_program(
                "from weightstore.safetensors import SafetensorsReader\n",
                """
                with SafetensorsReader.from_file(ARGS['small']) as reader:
                    arrays = [reader.get(name) for name in reader.names()]
                """)),
            Side('safe_open(framework="np") + get_tensor each', child_program(
                # numpy as our side has it: this row is about reading, not importing.
                "import numpy\nfrom safetensors import safe_open\n",
                """
                with safe_open(ARGS['small'], framework="np") as f:
                    arrays = [f.get_tensor(name) for name in f.keys()]
                """)),
        ),
        RowSpec(
            7, "inspect", "weightstore inspect --json (whole process)", "<= 1.0x",
            Side("weightstore inspect --json",
                 command=lambda f: [_console("weightstore"), "inspect", "--json", f.safetensors]),
            Side("safe_open script: names, dtypes, shapes as JSON",
                 command=lambda f: [sys.executable, "-c", INSPECT_PEER, f.safetensors]),
        ),
        RowSpec(
            8, "save-nofsync", "save without fsync", "<= 1.0x",
            Side("save_into(SafetensorsStore.durable(False))", child_program(
                "from weightstore import SafetensorsStore, save_into\n",
                "save_into(model, SafetensorsStore.from_file(ARGS['save_ours']).durable(False))",
                model="cpu")),
            Side("safetensors.torch.save_file", child_program(
                "from safetensors.torch import save_file\n",
                "save_file(model.state_dict(), ARGS['save_peer'])", model="cpu")),
            before_ours=_remove(files.save_ours),
            before_peer=_remove(files.save_peer),
        ),
        RowSpec(
            9, "save-fsync", "save, atomic + fsync", "<= 1.0x",
            Side("save_into(SafetensorsStore) (durable default)", child_program(
                "from weightstore import SafetensorsStore, save_into\n",
                "save_into(model, SafetensorsStore.from_file(ARGS['save_ours']))", model="cpu")),
            Side("save_file + fsync file and directory", child_program(
                "from safetensors.torch import save_file\n" + FSYNC_BOTH,
                """
                save_file(model.state_dict(), ARGS['save_peer'])
                fsync_path(ARGS['save_peer'])
                """, model="cpu")),
            before_ours=_remove(files.save_ours),
            before_peer=_remove(files.save_peer),
        ),
        RowSpec(
            10, "cold", "load, cold page cache", "keep",
            Side("load_from(model, SafetensorsStore)", child_program(
                LOAD_WS, "load_from(model, SafetensorsStore.from_file(ARGS['safetensors']))",
                model="cpu")),
            Side("load_state_dict(load_file())", child_program(
                LOAD_ST, "model.load_state_dict(load_file(ARGS['safetensors']))", model="cpu")),
            before_ours=_evictor(files.safetensors, cold_method),
            before_peer=_evictor(files.safetensors, cold_method),
            skipped=None if cold_method else "page-cache eviction does not work here",
        ),
        RowSpec(
            11, "burnpack", "BurnpackStore load (peer: load_file of the .safetensors)", "keep",
            Side("load_from(model, BurnpackStore)", child_program(
                "from weightstore import BurnpackStore, load_from\n",
                "load_from(model, BurnpackStore.from_file(ARGS['bpk']))", model="cpu")),
            Side("load_state_dict(load_file())", child_program(
                LOAD_ST, "model.load_state_dict(load_file(ARGS['safetensors']))", model="cpu")),
        ),
        RowSpec(
            12, "convert", ".pt -> .safetensors (whole process)", "<= 1.2x",
            Side("weightstore convert",
                 command=lambda f: [_console("weightstore"), "convert", "--quiet", f.pt,
                                    f.convert_ours]),
            Side("torch.load(mmap) + save_file + fsync",
                 command=lambda f: [sys.executable, "-c", CONVERT_PEER, f.pt, f.convert_peer]),
            before_ours=_remove(files.convert_ours),
            before_peer=_remove(files.convert_peer),
            report_rss=True,
        ),
    ]  # fmt: skip
    return rows


def _evictor(path: str, method: str | None) -> Callable[[Files], None]:
    """Before a cold load: drop `path` from the page cache the way that works here."""

    def run(_: Files) -> None:
        if method == "fadvise":
            evict(path)
        elif method == "drop_caches":
            drop_all_caches()

    return run


ROW_KEYS = (
    "import", "import-load", "load", "meta", "pt", "small", "inspect", "save-nofsync",
    "save-fsync", "cold", "burnpack", "convert",
)  # fmt: skip


# -- running --------------------------------------------------------------------------------------


def child_environment(directory: str) -> dict[str, str]:
    """Children read compiled bytecode, as from any installed package.

    The peers' bytecode was compiled when pip installed them. An editable install of ours has
    none, and with PYTHONDONTWRITEBYTECODE set every fresh process would recompile our sources,
    timing the compiler rather than the import. So bytecode goes to a cache in the scratch
    directory, compiled once up front (`compile_weightstore`).
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(directory, "pycache")
    return env


def compile_weightstore(directory: str) -> None:
    """Compile weightstore's modules into the children's bytecode cache."""
    import weightstore

    package = os.path.dirname(weightstore.__file__)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", package],
        check=True,
        env=child_environment(directory),
        stdout=subprocess.DEVNULL,
    )


def run_side(side: Side, files: Files) -> None:
    """One call of one side in a fresh process; appends its seconds (and peak RSS)."""
    if side.program is not None:
        argv = [sys.executable, "-c", side.program, files.args()]
    else:
        assert side.command is not None
        argv = side.command(files)
    started = time.perf_counter()
    child = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=files.directory,
        env=child_environment(files.directory),
    )
    stdout, stderr = child.communicate(timeout=CHILD_TIMEOUT_S)
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise RuntimeError(f"{side.label}: exit {child.returncode}\n{stderr[-4000:]}")
    if side.program is not None:
        side.seconds.append(float(json.loads(stdout.strip().splitlines()[-1])["seconds"]))
    else:
        side.seconds.append(wall)


def run_measured_process(side: Side, files: Files) -> None:
    """Run a whole-process side, recording its wall time and peak RSS."""
    assert side.command is not None
    wall, peak = run_with_peak_rss(
        side.command(files),
        label=side.label,
        cwd=files.directory,
        env=child_environment(files.directory),
    )
    side.seconds.append(wall)
    side.peak_rss.append(peak)


def run_row(row: RowSpec, files: Files, repeat: int, warmup: bool) -> None:
    """One untimed warm-up pair when `warmup`, then `repeat` pairs, ours first in each."""
    for index in range(repeat + 1 if warmup else repeat):
        for side, before in ((row.ours, row.before_ours), (row.peer, row.before_peer)):
            if before is not None:
                before(files)
            if row.report_rss:
                run_measured_process(side, files)
            else:
                run_side(side, files)
            if warmup and index == 0:
                side.seconds.clear()
                side.peak_rss.clear()


# -- the files ------------------------------------------------------------------------------------


def files_in(directory: str, shape: ModelShape) -> Files:
    """Where the model's files and the save rows' outputs go in `directory`."""

    def path(name: str) -> str:
        return os.path.join(directory, name)

    return Files(
        directory=directory,
        shape=shape,
        safetensors=path("model.safetensors"),
        pt=path("model.pt"),
        bpk=path("model.bpk"),
        small=path("small.safetensors"),
        save_ours=path("saved-ours.safetensors"),
        save_peer=path("saved-peer.safetensors"),
        convert_ours=path("converted-ours.safetensors"),
        convert_peer=path("converted-peer.safetensors"),
    )


def write_files_in_child(files: Files, quick: bool) -> None:
    """Run `write_files` in a child process. A child's ``ru_maxrss`` starts from its parent's
    peak at spawn (Linux carries the old high-water mark across fork and exec), so a parent
    that had built the model would put a floor of its size under row 12's peaks."""
    argv = [sys.executable, os.path.abspath(__file__), "--write-only", "--dir", files.directory]
    subprocess.run([*argv, *(["--quick"] if quick else [])], check=True)


def write_files(files: Files) -> None:
    """Build the model once in torch and save it three ways, plus the many-small file."""
    import numpy as np
    import torch
    from safetensors.numpy import save_file as save_numpy
    from safetensors.torch import save_file

    from weightstore import BurnpackStore, save_into

    shape = files.shape
    namespace: dict[str, Any] = {}
    exec(MODEL_CODE, namespace)
    torch.manual_seed(12)
    model = namespace["Model"](shape.vocab, shape.hidden, shape.ffn, shape.layers)
    state = model.state_dict()
    save_file(state, files.safetensors)
    torch.save(state, files.pt)
    save_into(model, BurnpackStore.from_file(files.bpk).overwrite())
    rng = np.random.default_rng(12)
    small = {
        f"t{index:05d}": rng.standard_normal((SMALL_SIDE, SMALL_SIDE)).astype(np.float32)
        for index in range(shape.small_count)
    }
    save_numpy(small, files.small)


@contextlib.contextmanager
def scratch_directory(directory: str | None) -> Iterator[str]:
    """`directory` (created if needed, kept), or a fresh one removed at the end."""
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
        yield directory
        return
    made = tempfile.mkdtemp(prefix="bench-paths-")
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


# -- report ---------------------------------------------------------------------------------------


def summary(seconds: Sequence[float]) -> dict[str, Any]:
    return {
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "samples_s": list(seconds),
    }


def row_result(row: RowSpec, shape: ModelShape) -> dict[str, Any]:
    result: dict[str, Any] = {
        "number": row.number,
        "key": row.key,
        "title": row.title,
        "target": row.target,
        "ours_label": row.ours.label,
        "peer_label": row.peer.label,
    }
    if row.skipped is not None:
        result["skipped"] = row.skipped
        return result
    ours, peer = summary(row.ours.seconds), summary(row.peer.seconds)
    result.update(ours=ours, peer=peer, ratio=ours["median_s"] / peer["median_s"])
    if row.report_rss:
        result["peak_rss_bytes"] = {
            "ours": max(row.ours.peak_rss),
            "peer": max(row.peer.peak_rss),
            "largest_tensor": shape.largest_tensor_size(),
        }
    return result


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def render(results: Sequence[dict[str, Any]]) -> str:
    """The table: medians (min) for both sides, the ratio and the issue's target."""
    header = ("#", "path", "weightstore median (min)", "peer median (min)", "ratio", "target")
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    notes = []
    for result in results:
        if "skipped" in result:
            cells = ["skipped: " + result["skipped"], "", "-"]
        else:
            ours, peer = result["ours"], result["peer"]
            cells = [
                f"{_ms(ours['median_s'])} ({_ms(ours['min_s'])})",
                f"{_ms(peer['median_s'])} ({_ms(peer['min_s'])})",
                f"{result['ratio']:.2f}x",
            ]
        lines.append(" | ".join([str(result["number"]), result["title"], *cells, result["target"]]))
        notes.append(
            f"{result['number']:>2}. ours: {result['ours_label']}; peer: {result['peer_label']}"
        )
        rss = result.get("peak_rss_bytes")
        if rss is not None:
            notes.append(
                f"    peak RSS: ours {rss['ours'] / MB:,.1f} MB, peer {rss['peer'] / MB:,.1f} MB, "
                f"largest tensor {rss['largest_tensor'] / MB:,.1f} MB"
            )
    return "\n".join([*lines, "", *notes])


def environment(args: argparse.Namespace, files: Files, cold_method: str | None) -> dict[str, Any]:
    import numpy
    import torch

    import safetensors
    import weightstore

    shape = files.shape
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "weightstore": weightstore.__version__,
        "model_bytes": 4 * shape.numel(),
        "shape": asdict(shape),
        "repeat": args.repeat,
        "quick": args.quick,
        "cold_eviction": cold_method,
        "directory": files.directory,
    }


# -- command line ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small model, 1 pair per row, no warm-up"
    )
    parser.add_argument("--repeat", type=int, help="timed pairs per row (default 5; quick 1)")
    parser.add_argument("--json", metavar="PATH", help="write every sample as JSON")
    parser.add_argument(
        "--only", help="comma-separated rows, by number or key: " + ",".join(ROW_KEYS)
    )
    parser.add_argument("--dir", help="scratch directory (default: a temporary one, removed)")
    parser.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = QUICK_REPEAT if args.quick else DEFAULT_REPEAT
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    wanted = set()
    for item in (args.only or "").split(","):
        item = item.strip()
        if not item:
            continue
        if item.isdigit() and 1 <= int(item) <= len(ROW_KEYS):
            item = ROW_KEYS[int(item) - 1]
        if item not in ROW_KEYS:
            parser.error(f"unknown row {item!r}; rows are 1-12 or " + ", ".join(ROW_KEYS))
        wanted.add(item)
    args.rows = wanted or set(ROW_KEYS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    with scratch_directory(args.dir) as directory:
        files = files_in(directory, shape)
        if args.write_only:
            write_files(files)
            return 0
        print(f"writing the model ({4 * shape.numel() / MB:,.1f} MB) to {directory}", flush=True)
        write_files_in_child(files, args.quick)
        compile_weightstore(directory)
        cold_method = eviction_method(files.safetensors) if "cold" in args.rows else None
        results = []
        for row in row_specs(files, cold_method):
            if row.key not in args.rows:
                continue
            if row.skipped is None:
                print(f"row {row.number}: {row.title}", flush=True)
                run_row(row, files, args.repeat, warmup=not args.quick)
            results.append(row_result(row, shape))
        document = {"environment": environment(args, files, cold_method), "rows": results}
    print()
    print(render(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(document, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
