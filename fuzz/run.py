"""Run a fuzz target under atheris: ``python -m fuzz.run --parser burnpack --runs 1000000``.

The command is a supervisor: it starts `--jobs` worker processes (each ``python -m fuzz.run
--worker``, i.e. atheris/libFuzzer with coverage instrumentation of ``weightstore``), restarts a
worker that libFuzzer ends early (a per-input timeout, the RSS limit, a signal), and adds up the
inputs each worker reports until `--runs` inputs (or `--seconds`) are done. Options it does not
know are passed to libFuzzer as they are (``-seed=1``, ``-max_len=...``); ``-jobs=N`` is read as
``--jobs N``.

Each worker sets ``RLIMIT_AS`` (`--memory-mb`) before importing anything, and gives libFuzzer
``-timeout=`` and ``-rss_limit_mb=``. A foreign exception does not stop a worker: the input is
saved to fuzz/crashers/<parser>/ (at most `SAVED_PER_SIGNATURE` per exception class and
location), counted, and fuzzing goes on; a timeout or memory kill is saved by libFuzzer there too
(``timeout-*``, ``oom-*``, ``crash-*``). New corpus entries go to `--workdir`, never into
fuzz/corpus/, whose seeds are read only.

The summary (JSON, also at <workdir>/summary.json) gives inputs, rate, findings by signature,
worker deaths, the target's own counts (how many quantized groups were dequantized, say) and the
peak RSS libFuzzer reported; it is the figure docs/security.md quotes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE
from typing import Any, Final

FUZZ_DIR: Final = Path(__file__).resolve().parent
REPO: Final = FUZZ_DIR.parent
CORPUS: Final = FUZZ_DIR / "corpus"
CRASHERS: Final = FUZZ_DIR / "crashers"
PARSERS: Final = ("burnpack", "safetensors", "pytorch", "gguf", "set-index", "dcp-index")
SAVED_PER_SIGNATURE: Final = 2  # inputs kept for one (class, location); the rest only counted
STATS_EVERY_S: Final = 1.0
STRUCTURED_SHARE: Final = 0.5  # of mutations: the format-aware mutator; the rest libFuzzer's
REPLAY_CPU_S: Final = 5  # CPU seconds one input may take through every read path, uninstrumented
REPLAY_MEMORY_MB: Final = 4096
MAX_FAILED_STARTS: Final = 5  # workers that die before any input: a broken setup, not a bug
MAX_LEN: Final = 65_536  # bytes; the seeds are under 10 KB; big inputs only run slower
# An index attack needs some size (2,000 chunks or colliding keys: up to 160 KB), and libFuzzer
# would drop such inputs at 64 KB; larger ones only slow every input down (each is parsed a
# dozen times), and the sizes that showed the quadratic checks have tests of their own.
MAX_INDEX_LEN: Final = 2**18


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:40] or "finding"


# -- the worker ------------------------------------------------------------------------------------


class _Worker:
    """State of one atheris process: the counts it reports and the findings it saves."""

    def __init__(self, parser: str, stats: Path, crashers: Path) -> None:
        self.parser, self.stats, self.crashers = parser, stats, crashers
        self.inputs = 0
        self.findings: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.last_write = 0.0
        self.counts: Counter[str] = Counter()  # the target's own (`fuzz.targets.COUNTS`)
        self.crashers.mkdir(parents=True, exist_ok=True)

    def record(self, kind: str, where: str, detail: str, data: bytes) -> None:
        key = f"{kind} @ {where}"
        self.findings[key] += 1
        self.examples.setdefault(key, detail)
        prefix = f"{_slug(kind)}-{hashlib.sha1(key.encode()).hexdigest()[:8]}-"
        if len(list(self.crashers.glob(prefix + "*"))) < SAVED_PER_SIGNATURE:
            name = prefix + hashlib.sha1(data).hexdigest()[:12]
            (self.crashers / name).write_bytes(data)
            (self.crashers / (name + ".txt")).write_text(f"{key}\n{detail}\n")
        self.write_stats(force=True)

    def write_stats(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_write < STATS_EVERY_S:
            return
        self.last_write = now
        state = {
            "inputs": self.inputs,
            "findings": dict(self.findings),
            "examples": self.examples,
            "counts": dict(self.counts),
        }
        scratch = self.stats.with_suffix(".tmp")
        scratch.write_text(json.dumps(state))
        os.replace(scratch, self.stats)


_NOT_IMPORTED: Final = (
    "weightstore.__main__",  # runs the command line on import
    # The model bridges that import torch or jax: no reader uses them, and with either loaded a
    # worker runs ten times slower (300 inputs: 25.6 s against 2.6 s), its garbage collections
    # and /proc/self/maps reads (the leak check) walking the frameworks' objects and libraries.
    "weightstore.bridge._torch",
    "weightstore.distributed._torch",
    "weightstore.distributed._fanout",
    "weightstore.dcp._storage",
    "weightstore.bridge._jax",
)


def _instrumented_imports() -> Any:
    """Import the targets with every weightstore module instrumented for coverage."""
    import importlib
    import pkgutil

    import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]

    with atheris.instrument_imports(include=["weightstore"]):
        import weightstore

        for module in pkgutil.walk_packages(weightstore.__path__, "weightstore."):
            if module.name not in _NOT_IMPORTED:
                importlib.import_module(module.name)
    from fuzz import index_mutators, mutators, targets

    return atheris, targets, {**mutators.MUTATORS, **index_mutators.INDEX_MUTATORS}


def worker_main(args: argparse.Namespace, libfuzzer: list[str]) -> None:
    limit = args.memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    atheris, targets, mutators_by_parser = _instrumented_imports()
    state = _Worker(args.parser, Path(args.stats), Path(args.crashers))
    state.counts = targets.COUNTS
    mutate: Callable[[bytes, random.Random], bytes | None] = mutators_by_parser[args.parser]

    def test_one_input(data: bytes) -> None:
        state.inputs += 1
        try:
            targets.check(args.parser, data)
        except targets.Finding as finding:
            state.record(finding.kind, finding.where, finding.detail, data)
        state.write_stats()

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < STRUCTURED_SHARE:
            try:
                out = mutate(data, rng)
            except Exception:  # a mutator bug must not end the run; fall back to bytes
                out = None
            if out is not None and len(out) <= max_size:
                return out
        return bytes(atheris.Mutate(data, max_size))

    atheris.Setup([sys.argv[0], *libfuzzer], test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


# -- replaying one input --------------------------------------------------------------------------


def replay_main(parser: str, path: str, cpu_s: int, memory_mb: int) -> int:
    """Run one saved input through the target under CPU and memory limits, uninstrumented.

    Exit 0: only typed errors. Exit 1: a finding (printed). Killed by SIGXCPU: over `cpu_s`.
    """
    limit = memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    from fuzz import targets

    try:
        targets.check(parser, Path(path).read_bytes(), thorough=True)
    except targets.Finding as finding:
        print(f"finding: {finding}")
        return 1
    return 0


def replay(parser: str, path: Path, cpu_s: int = REPLAY_CPU_S, wall_s: float = 300) -> str | None:
    """None when `path` runs clean within `cpu_s` CPU seconds, else what went wrong.

    CPU time, not wall time: a loaded machine must not turn a slow start into a finding.
    """
    command = [
        sys.executable, "-m", "fuzz.run", "--parser", parser, "--replay", str(path),
        "--replay-cpu", str(cpu_s),
    ]  # fmt: skip
    with subprocess.Popen(command, cwd=REPO, stdout=PIPE, stderr=PIPE, text=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=wall_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return f"still running after {wall_s:.0f} s of wall time"
        finally:
            _remove_scratch(process.pid)  # a process killed for its CPU time leaves its file
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if done.returncode == -signal.SIGXCPU or done.returncode == -signal.SIGKILL:
        return f"over {cpu_s} s of CPU time"
    if done.returncode != 0:
        return (done.stdout + done.stderr).strip()[-1500:]
    return None


# -- the supervisor -------------------------------------------------------------------------------

_DEATHS: Final = (
    ("timeout", "ERROR: libFuzzer: timeout"),
    ("out-of-memory", "ERROR: libFuzzer: out-of-memory"),
    ("deadly signal", "ERROR: libFuzzer: deadly signal"),
    ("uncaught exception", "Uncaught Python exception"),
)


def _start(
    args: argparse.Namespace, job: int, runs: int, seconds: float | None, libfuzzer: list[str]
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    workdir = Path(args.workdir)
    corpus = workdir / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    stats = workdir / f"stats-{job}-{time.time_ns()}.json"
    limits = [t for t in (seconds, args.restart_every) if t is not None]
    log = workdir / f"job-{job}.log"
    flags = [
        f"-runs={runs}",
        f"-timeout={args.timeout}",
        f"-rss_limit_mb={args.rss_mb}",
        f"-max_len={MAX_INDEX_LEN if args.parser.endswith('-index') else MAX_LEN}",
        f"-artifact_prefix={Path(args.crashers)}/",
        "-print_final_stats=1",
        "-report_slow_units=100000",  # wall time on a shared machine; timeouts are replayed
        *([f"-max_total_time={max(1, int(min(limits)))}"] if limits else []),
        *libfuzzer,
        str(corpus),
        str(CORPUS / args.parser),
    ]
    command = [
        sys.executable, "-m", "fuzz.run", "--worker", "--parser", args.parser,
        "--stats", str(stats), "--crashers", str(args.crashers),
        "--memory-mb", str(args.memory_mb), *flags,
    ]  # fmt: skip
    Path(args.crashers).mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    return process, stats, log


def _read_stats(path: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads(path.read_text())
        return state
    except (OSError, ValueError):
        return {"inputs": 0, "findings": {}, "examples": {}, "counts": {}}


_EXECUTED: Final = re.compile(rb"stat::number_of_executed_units: (\d+)")
_FRAME: Final = re.compile(rb'File "[^"]*src/weightstore/([^"]+)", line (\d+) in (\w+)')
_ARTIFACT: Final = re.compile(rb"Test unit written to (\S+)")
_RSS: Final = re.compile(rb" rss: (\d+)Mb")


@dataclass(slots=True)
class _Outcome:
    """What a worker's log says: inputs libFuzzer ran (its final, exact count; 0 when it died
    without one), how it died, where (the innermost weightstore frame), the saved input, and
    the largest RSS libFuzzer printed (MB)."""

    executed: int
    death: str | None
    where: str
    artifact: Path | None
    peak_rss_mb: int = 0


def _outcome(log: Path, offset: int) -> _Outcome:
    with open(log, "rb") as file:
        file.seek(offset)
        text = file.read()
    executed = _EXECUTED.findall(text)
    death = next((kind for kind, marker in _DEATHS if marker.encode() in text), None)
    frame = _FRAME.search(text)  # a timeout's stack is printed innermost first
    where = "?" if frame is None else b"%s:%s (%s)" % frame.groups()
    artifact = _ARTIFACT.search(text)
    return _Outcome(
        int(executed[-1]) if executed else 0,
        death,
        where if isinstance(where, str) else where.decode(errors="replace"),
        Path(artifact.group(1).decode()) if artifact else None,
        max((int(mb) for mb in _RSS.findall(text)), default=0),
    )


def _keep_artifact(parser: str, outcome: _Outcome, key: str) -> bool:
    """Keep libFuzzer's saved input beside a note of its signature (or delete it when
    `SAVED_PER_SIGNATURE` inputs with that signature are kept already); False for a timeout
    that a replay does not reproduce (the artifact is deleted)."""
    artifact = outcome.artifact
    if artifact is None or not artifact.exists():
        return True
    if outcome.death == "timeout" and replay(parser, artifact) is None:
        artifact.unlink()  # libFuzzer's limit is wall time; the machine was busy, not the input
        return False
    notes = list(artifact.parent.glob("*.txt"))
    if sum(1 for note in notes if note.read_text().split("\n", 1)[0] == key) >= SAVED_PER_SIGNATURE:
        artifact.unlink()
        return True
    artifact.with_name(artifact.name + ".txt").write_text(f"{key}\n")
    return True


def _terminate_on_signal(running: dict[int, Any]) -> None:
    """On SIGTERM or SIGINT, end the workers too, so none outlives its supervisor."""

    def stop(signum: int, frame: Any) -> None:
        for process, *_ in running.values():
            process.terminate()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def _remove_scratch(pid: int) -> None:
    from fuzz.targets import scratch_prefix

    for folder in {Path("/dev/shm"), Path(tempfile.gettempdir())}:
        for path in folder.glob(scratch_prefix(pid) + "*"):
            if path.is_dir() and not path.is_symlink():  # an index target's directory
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


@dataclass(slots=True)
class _Tally:
    """What the workers of one supervised run have reported so far."""

    done: list[int]
    findings: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    deaths: Counter[str] = field(default_factory=Counter)
    deaths_by_signature: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    peak_rss_mb: int = 0
    failed_starts: int = 0

    def add(self, parser: str, job: int, worker: _Running) -> None:
        """Count a finished worker: its inputs, findings and, if it died, how and where."""
        process, stats, log, offset = worker
        state = _read_stats(stats)
        stats.unlink(missing_ok=True)
        _remove_scratch(process.pid)
        # The worker's own count lags by up to STATS_EVERY_S; libFuzzer's final one is exact.
        outcome = _outcome(log, offset)
        inputs = max(int(state["inputs"]), outcome.executed)
        if not inputs and process.returncode != 0:
            self.failed_starts += 1
            if self.failed_starts >= MAX_FAILED_STARTS:
                raise SystemExit(f"workers die before their first input; see {log}")
        self.done[job] += max(inputs, 1)  # a worker that died at once still ran one input
        self.findings.update(state["findings"])
        self.counts.update(state.get("counts", {}))
        self.peak_rss_mb = max(self.peak_rss_mb, outcome.peak_rss_mb)
        for key, detail in state["examples"].items():
            self.examples.setdefault(key, detail)
        if process.returncode != 0:
            death = outcome.death or f"exit {process.returncode}"
            self.deaths[death] += 1
            key = f"{death} @ {outcome.where}"
            if not _keep_artifact(parser, outcome, key):
                key = "timeout not reproduced in a CPU-time replay (machine load)"
            self.deaths_by_signature[key] += 1

    def summary(self, args: argparse.Namespace, elapsed: float) -> dict[str, Any]:
        return {
            "parser": args.parser,
            "inputs": sum(self.done),
            "seconds": round(elapsed, 1),
            "inputs_per_second": round(sum(self.done) / elapsed, 1) if elapsed else 0.0,
            "foreign_exceptions": sum(self.findings.values()),
            "signatures": dict(self.findings),
            "examples": self.examples,
            "worker_deaths": dict(self.deaths),
            "deaths_by_signature": dict(self.deaths_by_signature),
            "target_counts": dict(self.counts),
            "peak_rss_mb": self.peak_rss_mb,
            "jobs": args.jobs,
        }


_Running = tuple[subprocess.Popen[bytes], Path, Path, int]  # process, stats, log, log offset


def supervise(args: argparse.Namespace, libfuzzer: list[str]) -> dict[str, Any]:
    """Run `args.jobs` workers until `args.runs` inputs in all, restarting the ones that end
    early (or every `args.restart_every` seconds), until `args.seconds` have passed."""
    started = time.monotonic()
    deadline = None if args.seconds is None else started + args.seconds
    share = [args.runs // args.jobs + (j < args.runs % args.jobs) for j in range(args.jobs)]
    tally = _Tally(done=[0] * args.jobs)
    running: dict[int, _Running] = {}
    _terminate_on_signal(running)
    while True:
        for job in range(args.jobs):
            left = share[job] - tally.done[job]
            remaining = None if deadline is None else deadline - time.monotonic()
            if job in running or left <= 0 or (remaining is not None and remaining < 1):
                continue
            log = Path(args.workdir) / f"job-{job}.log"
            offset = log.stat().st_size if log.exists() else 0
            process, stats, log = _start(args, job, left, remaining, libfuzzer)
            running[job] = (process, stats, log, offset)
        if not running:
            break
        time.sleep(0.5)
        for job, worker in list(running.items()):
            if worker[0].poll() is None:
                continue
            del running[job]
            tally.add(args.parser, job, worker)
            if args.verbose:
                found, died = sum(tally.findings.values()), dict(tally.deaths)
                print(
                    f"job {job}: {sum(tally.done):,} inputs, {found} findings, deaths {died}",
                    flush=True,
                )
    summary = tally.summary(args, time.monotonic() - started)
    Path(args.workdir, "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.split("\n")[0])
    parser.add_argument("--parser", choices=PARSERS, required=True)
    parser.add_argument("--runs", type=int, default=1_000_000, help="inputs in all jobs together")
    parser.add_argument("--seconds", type=float, help="stop after this long, whatever the count")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--timeout", type=int, default=10, help="seconds per input (libFuzzer)")
    parser.add_argument("--rss-mb", type=int, default=2048, help="libFuzzer's -rss_limit_mb")
    parser.add_argument("--memory-mb", type=int, default=4096, help="RLIMIT_AS of each worker")
    parser.add_argument("--workdir", help="working corpus, logs, summary (default: a temp dir)")
    parser.add_argument("--crashers", help="where findings go (default: fuzz/crashers/PARSER)")
    parser.add_argument(
        "--restart-every",
        type=int,
        metavar="SECONDS",
        help="end and restart each worker this often, so it runs the current code",
    )
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stats", help=argparse.SUPPRESS)
    parser.add_argument("--replay", metavar="FILE", help="run one saved input (see replay)")
    parser.add_argument("--replay-cpu", type=int, default=REPLAY_CPU_S, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    libfuzzer = []
    for flag in rest:
        if flag.startswith("-jobs="):
            args.jobs = int(flag.split("=", 1)[1])
        else:
            libfuzzer.append(flag)
    if args.crashers is None:
        args.crashers = str(CRASHERS / args.parser)
    if args.workdir is None:
        folder = os.environ.get("TMPDIR", "/tmp")
        args.workdir = str(Path(folder) / f"weightstore-fuzz-{args.parser}-{os.getpid()}")
    return args, libfuzzer


def main(argv: list[str] | None = None) -> int:
    args, libfuzzer = _parse(sys.argv[1:] if argv is None else argv)
    if args.replay:
        return replay_main(args.parser, args.replay, args.replay_cpu, args.memory_mb)
    if args.worker:
        worker_main(args, libfuzzer)
        return 0
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    summary = supervise(args, libfuzzer)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
