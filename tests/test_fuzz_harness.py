"""The fuzz harness (fuzz/, docs/security.md): crasher regressions, seeds, mutators, smoke runs.

- Every file in fuzz/crashers/<parser>/ is an input that once made a reader misbehave; each is
  a test here, run through the same target the fuzzer runs, in a subprocess under the same
  limits (`fuzz.run.replay`: 5 s of CPU time, 4 GiB), and passes once only typed errors come
  out and the CLI's ``inspect``, ``inspect --json`` and ``verify`` each exit 0, 1 or 2, a
  failure with exactly one ``weightstore: error:`` line (`fuzz.targets.stderr_problem`). For
  the index parsers the file is the index, read in the target's directory. The name says what
  it did: ``<ExceptionClass>-*`` (saved by the harness), ``timeout-*``, ``oom-*`` or
  ``crash-*`` (saved by libFuzzer); the ``.txt`` beside it, where and what.
- The seeds read cleanly, and the structure-aware mutators produce inputs the targets survive
  (no atheris needed); the SafeTensors seeds' quantized groups dequantize, and their mutants
  still open and are refused by the group path with the part at fault named.
- A smoke run of each target under atheris, a few hundred inputs in seconds; skipped when atheris
  is not installed. ``pytest -m slow`` runs 20,000 inputs per parser; the long run is
  ``python -m fuzz.run --parser P --runs 1000000`` (docs/security.md).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fuzz import index_mutators, index_targets, mutators, quantized_mutators, targets
from fuzz.run import CORPUS, CRASHERS, PARSERS, REPLAY_CPU_S, replay
from weightstore import formats, open_reader
from weightstore.errors import (
    DTypeError,
    QuantizedLayoutError,
    QuantizedTensorError,
    WeightstoreError,
)
from weightstore.quantized import dequantize_group, recognise
from weightstore.quantized._hf_int import resolve_int_pack
from weightstore.safetensors import SafetensorsReader

MUTATORS = {**mutators.MUTATORS, **index_mutators.INDEX_MUTATORS}

REPO = Path(__file__).resolve().parent.parent


def _crashers() -> list[tuple[str, Path]]:
    return [
        (parser, path)
        for parser in PARSERS
        for path in sorted((CRASHERS / parser).glob("*"))
        if path.is_file() and path.suffix != ".txt" and not path.name.startswith(".")
    ]


def _seeds(parser: str) -> list[Path]:
    return sorted((CORPUS / parser).glob("seed-*"))


# -- crasher regressions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parser", "path"), _crashers(), ids=[f"{p}/{c.name}" for p, c in _crashers()]
)
def test_crasher_raises_only_typed_errors(parser: str, path: Path) -> None:
    # In a subprocess under the fuzzer's limits (5 s of CPU, 4 GiB of address space): some
    # inputs fail only there (a MemoryError from an allocation the file dictates), and a hang or
    # a fatal signal must fail this test, not end the session.
    # A timeout crasher runs the whole target (both read modes, detection, inspect, --json and
    # verify), each walking the file again; it passes when all of them end within twice the
    # fuzzer's per-input limit, which is still a bound, not a hang.
    cpu_s = 2 * REPLAY_CPU_S if path.name.startswith("timeout-") else REPLAY_CPU_S
    problem = replay(parser, path, cpu_s=cpu_s)
    assert problem is None, f"{parser}/{path.name}: {problem}"


# -- seeds and mutators ----------------------------------------------------------------------------


def test_the_runner_and_the_targets_know_the_same_parsers() -> None:
    assert PARSERS == targets.PARSERS and set(PARSERS) == set(MUTATORS)


@pytest.mark.parametrize("parser", index_targets.INDEX_PARSERS)
def test_index_seeds_read_cleanly_in_their_directory(parser: str) -> None:
    seeds = _seeds(parser)
    assert len(seeds) >= 3, f"no seeds in {CORPUS / parser}; run python -m fuzz.seeds"
    directory = index_targets.index_directory(parser)
    for path in seeds:
        (directory / index_targets.INDEX_NAMES[parser]).write_bytes(path.read_bytes())
        with open_reader(directory) as reader:
            assert reader.names(), path.name
            for name in reader.names():
                reader.get(name)
        targets.check(parser, path.read_bytes(), thorough=True)


def test_index_directories_hold_every_hostile_neighbour() -> None:
    directory = index_targets.index_directory("set-index")
    present = {p.name for p in directory.iterdir()}
    assert set(index_targets.HOSTILE_NEIGHBOURS) <= present
    assert (directory / "loop.safetensors").is_symlink()
    assert (directory / "fifo.safetensors").is_fifo()


@pytest.mark.parametrize("parser", targets.CONTAINER_PARSERS)
def test_seeds_are_valid_files_of_their_format(parser: str) -> None:
    seeds = _seeds(parser)
    assert seeds, f"no seeds in {CORPUS / parser}; run python -m fuzz.seeds"
    assert sum(p.stat().st_size for p in seeds) < 200_000  # the corpus stays small
    for path in seeds:
        assert formats.detect_format(path).name == parser, path.name
        with open_reader(path) as reader:
            for name in reader.names():
                _read(reader, name)
        targets.check(parser, path.read_bytes(), thorough=True)


def _read(reader: Any, name: str) -> None:
    """`get`; for a quantized GGUF tensor in a big-endian file, the refusal it is documented
    to give and the raw blocks; for a burnpack QFloat tensor, its dequantized values; for a
    torch quantized tensor, its refusal and its values."""
    if getattr(reader, "is_quantized", None) and reader.is_quantized(name):  # torch's qtensors
        with pytest.raises(QuantizedTensorError):
            reader.get(name)
        reader.get_dequantized(name)
    elif getattr(reader.descriptor(name), "quant_scheme", None) is not None:
        assert np.isfinite(reader.get_dequantized(name)).all()
    elif not getattr(reader.descriptor(name), "quantized", False):
        reader.get(name)
    elif getattr(reader, "byte_order", "<") == ">":
        with pytest.raises(DTypeError, match="big-endian"):
            reader.get(name)
        reader.get_raw(name)
    else:
        reader.get(name)


def test_pytorch_seeds_hold_quantized_tensors_of_both_schemes() -> None:
    from weightstore.pytorch_reader import PytorchReader

    with PytorchReader(CORPUS / "pytorch" / "seed-quantized") as reader:
        schemes = {reader.quantized_info(name).scheme for name in reader.names()}
    assert schemes == {"per_tensor_affine", "per_channel_affine"}


def test_gguf_seeds_hold_every_kind_of_value_and_tensor() -> None:
    from weightstore.gguf import GgufReader

    kinds: set[str] = set()
    types: set[str] = set()
    orders: set[str] = set()
    for path in _seeds("gguf"):
        with GgufReader.from_file(path) as reader:
            kinds |= {reader.metadata_type(key) for key in reader.metadata_keys()}
            types |= {reader.ggml_type(name).name for name in reader.names()}
            orders.add(reader.byte_order)
            if "general.alignment" in reader.metadata_keys():
                orders.add(f"aligned {reader.alignment}")
    assert {"string", "bool", "float32", "float64", "uint8", "int64", "uint64"} <= kinds
    assert {"array[string]", "array[array]", "array[int32]"} <= kinds
    assert {"F32", "F16", "BF16", "I8", "I64", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_NL"} <= types
    assert {"<", ">", "aligned 1", "aligned 64"} <= orders


@pytest.mark.parametrize("parser", PARSERS)
def test_structured_mutations_change_and_reparse(parser: str) -> None:
    mutate = MUTATORS[parser]
    for path in _seeds(parser):
        data = path.read_bytes()
        outputs = [mutate(data, random.Random(seed)) for seed in range(20)]
        changed = [out for out in outputs if out is not None and out != data]
        assert len(changed) >= 10, path.name  # the format-aware path, not the byte fallback
        assert outputs == [mutate(data, random.Random(seed)) for seed in range(20)]  # seeded


def test_mutators_decline_what_is_not_their_format() -> None:
    rng = random.Random(0)
    assert mutators.mutate_burnpack(b"NRUB", rng) is None
    assert mutators.mutate_safetensors(b"\x02\x00\x00\x00\x00\x00\x00\x00{x", rng) is None
    assert mutators.mutate_pytorch(b"\xff\xff", rng) is None
    assert mutators.mutate_gguf(b"GGUF\x03\x00\x00\x00" + bytes(8), rng) is None
    assert mutators.mutate_gguf(b"GGUF\x03\x00\x00\x00" + bytes(8) + b"\xff" * 8, rng) is None
    assert index_mutators.mutate_set_index(b"[1, 2]", rng) is None
    assert index_mutators.mutate_dcp_index(b"{x", rng) is None


def _quantized_seed(label: str) -> bytes:
    return (CORPUS / "safetensors" / f"seed-quantized-{label}").read_bytes()


def _groups_of(data: bytes) -> tuple[Any, list[Any], dict[str, Any]]:
    """What the target does with a file's groups, by hand: the reader, its groups under the
    metadata's config, and the arrays of their parts."""
    reader = SafetensorsReader.from_bytes(data)
    config = json.loads(reader.metadata().get("quantization_config", "null"))
    header = {
        n: (reader.descriptor(n).dtype.name, reader.descriptor(n).shape) for n in reader.names()
    }
    groups, _ = recognise(header, config)
    return reader, groups, header


def test_quantized_seeds_dequantize_every_layout() -> None:
    """Each seed's groups, through the target and by hand: every layout is reached, and each
    dequantizes to its logical shape with the values of the references' formulas."""
    layouts: set[str] = set()
    for path in _seeds("safetensors"):
        if not path.name.startswith("seed-quantized-"):
            continue
        targets.COUNTS.clear()
        targets.check("safetensors", path.read_bytes(), thorough=True)
        reader, groups, header = _groups_of(path.read_bytes())
        assert groups and targets.COUNTS["groups dequantized"] >= len(groups), path.name
        assert targets.COUNTS["dequantize refused"] == 0, path.name
        for group in groups:
            parts = {name: reader.get(name) for name in group.parts}
            if group.layout == "int-pack":
                group = resolve_int_pack(group, parts[group.companions["shape"]], header)
            values = dequantize_group(group, parts)
            assert values.shape == group.logical_shape and values.dtype == np.float32
            layouts.add(group.layout)
            if group.layout == "nvfp4" and "global_scale" in group.companions:
                # fp4 * (scale / global): the first byte's low nibble, in block 0 of row 0
                code = parts[group.codes][0, 0] & 0x0F
                e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6][code]
                scale = np.float32(parts[group.companions["scale"]][0, 0])
                divided = scale / parts[group.companions["global_scale"]][0]
                assert values[0, 0] == np.float32(e2m1) * divided
    assert layouts == {"fp8-block", "fp8-channel", "fp8-tensor", "mxfp4", "nvfp4", "int-pack"}


def _edited(file: bytes, name: str, **changes: Any) -> bytes:
    """`file` with tensor `name` changed (dtype, shape, data) and laid out again."""
    parsed = quantized_mutators._decode(file)
    assert parsed is not None
    tensors, metadata = parsed
    [tensor] = [t for t in tensors if t["name"] == name]
    tensor.update(changes)
    return quantized_mutators._encode(tensors, metadata)


EDITS = [  # (seed, tensor, change, refused at, companion at fault)
    ("int-pack", "q.weight_g_idx", {"data": np.full(64, 2, "<i4").tobytes()}, "dequantize",
     "q.weight_g_idx"),
    ("int-pack", "q.weight_shape", {"data": np.array([4, 2**40], "<i8").tobytes()},
     "dequantize", "q.weight_shape"),
    ("int-pack", "q.weight_shape", {"data": np.array([4, -64], "<i8").tobytes()}, "dequantize",
     "q.weight_shape"),
    ("int-pack", "q.weight_packed", {"shape": [4, 7], "data": bytes(4 * 7 * 4)}, "recognise",
     "q.weight_scale"),
    ("int-pack", "q.weight_scale", {"dtype": "F8_E4M3", "data": bytes(8)}, "recognise",
     "q.weight_scale"),
    ("nvfp4", "n.weight_global_scale", {"data": np.float32("inf").tobytes()}, "dequantize",
     "n.weight_global_scale"),
    ("nvfp4", "n.weight_global_scale", {"data": np.float32("nan").tobytes()}, "dequantize",
     "n.weight_global_scale"),
    ("nvfp4-modelopt", "o.weight_scale_2", {"data": np.float32("-inf").tobytes()}, "dequantize",
     "o.weight_scale_2"),
    ("nvfp4", "n.weight_scale", {"shape": [4, 3], "data": bytes(12)}, "recognise",
     "n.weight_scale"),
    ("nvfp4", "n.weight_scale", {"dtype": "F16", "data": bytes(16)}, "recognise",
     "n.weight_scale"),
    ("mxfp4", "e.gate_up_proj_scales", {"shape": [2, 3, 3], "data": bytes(18)}, "recognise",
     "e.gate_up_proj_scales"),
    ("fp8-block", "a.weight_scale_inv", {"shape": [3, 2], "data": bytes(24)}, "recognise",
     "a.weight_scale_inv"),
]  # fmt: skip


@pytest.mark.parametrize(("seed", "name", "change", "stage", "companion"), EDITS)
def test_mutated_quantized_seeds_are_refused_with_the_part_at_fault(
    seed: str, name: str, change: dict[str, Any], stage: str, companion: str
) -> None:
    """The mutations the fuzzer makes, made by hand: the file still opens, and the group
    path refuses it with a QuantizedLayoutError naming the part, which the target accepts."""
    data = _edited(_quantized_seed(seed), name, **change)
    with pytest.raises(QuantizedLayoutError) as caught:
        reader, groups, header = _groups_of(data)
        assert stage == "dequantize"  # recognition passed: the values are what is wrong
        for group in groups:
            parts = {part: reader.get(part) for part in group.parts}
            if group.layout == "int-pack":
                group = resolve_int_pack(group, parts[group.companions["shape"]], header)
            dequantize_group(group, parts)
    assert caught.value.companion == companion
    assert repr(companion) in str(caught.value)
    targets.COUNTS.clear()
    targets.check("safetensors", data, thorough=True)  # typed: no finding
    refusals = "recognise refused" if stage == "recognise" else "dequantize refused"
    assert targets.COUNTS[refusals] >= 1


def test_the_quantized_mutator_keeps_files_opening() -> None:
    """Edits of shapes and dtypes resize the data, so most mutants still open and reach the
    group path; the byte-level mutators would have broken their offsets."""
    for path in _seeds("safetensors"):
        data = path.read_bytes()
        outputs = [quantized_mutators.mutate_quantized(data, random.Random(s)) for s in range(30)]
        if not path.name.startswith("seed-quantized-"):
            assert outputs == [None] * 30, path.name  # no quantized part: not its file
            continue
        changed = [out for out in outputs if out is not None and out != data]
        opened = 0
        for out in changed:
            with contextlib.suppress(WeightstoreError), SafetensorsReader.from_bytes(out) as r:
                r.names()
                opened += 1
        assert len(changed) >= 20 and opened >= 0.8 * len(changed), path.name


def test_cli_stderr_is_one_error_line_on_failure() -> None:
    error = "weightstore: error: a.safetensors: truncated\n"
    warning = "weightstore: warning: stray shard\n"
    assert targets.stderr_problem(2, error) is None
    assert targets.stderr_problem(2, warning + error) is None
    assert targets.stderr_problem(0, warning) is None
    assert targets.stderr_problem(2, "") is not None
    assert targets.stderr_problem(2, error + error) is not None
    assert targets.stderr_problem(2, "Traceback (most recent call last):\n" + error) is not None
    assert targets.stderr_problem(0, "oops\n") is not None


@pytest.mark.parametrize("parser", PARSERS)
def test_mutated_inputs_raise_only_typed_errors(parser: str) -> None:
    """The fuzz loop without atheris: 60 structured mutants per parser through the target."""
    rng = random.Random(f"ci-{parser}")
    corpus = [p.read_bytes() for p in _seeds(parser)]
    for _ in range(60):
        data = rng.choice(corpus)
        for _ in range(rng.randrange(1, 4)):
            data = MUTATORS[parser](data, rng) or data
        try:
            targets.check(parser, data)
        except targets.Finding as finding:
            pytest.fail(f"{finding}; input {data[:64]!r}... ({len(data):,} bytes)")


def test_a_foreign_exception_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path: str) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setitem(targets._READERS, "safetensors", broken)
    with pytest.raises(targets.Finding) as caught:
        targets.check("safetensors", b"")
    assert caught.value.kind == "ZeroDivisionError"


def test_a_dead_worker_log_gives_its_count_cause_and_place(tmp_path: Path) -> None:
    from fuzz.run import _outcome

    log = tmp_path / "job-0.log"
    log.write_bytes(
        b"old run\nstat::number_of_executed_units: 5\n"
        b" === Timeout: 11s elapsed, timeout=10s ===\n"
        b'  File "/x/src/weightstore/pytorch_reader/_walk.py", line 107 in walk\n'
        b'  File "/x/src/weightstore/pytorch_reader/_walk.py", line 118 in walk\n'
        b"==1== ERROR: libFuzzer: timeout after 11 seconds\n"
        b"artifact_prefix='c/'; Test unit written to c/timeout-abc\n"
    )
    outcome = _outcome(log, offset=len(b"old run\nstat::number_of_executed_units: 5\n"))
    assert outcome.executed == 0  # died before its final stats; the earlier run's don't count
    assert outcome.death == "timeout"
    assert outcome.where == "pytorch_reader/_walk.py:107 (walk)"
    assert outcome.artifact == Path("c/timeout-abc")
    assert outcome.peak_rss_mb == 0  # no status line in this run's part of the log
    log.write_bytes(b"#512\tNEW cov: 9 ft: 9 rss: 81Mb L: 8\n#1024\tpulse rss: 97Mb\n")
    assert _outcome(log, offset=0).peak_rss_mb == 97


# -- atheris ---------------------------------------------------------------------------------------


def _fuzz(parser: str, runs: int, tmp_path: Path) -> dict[str, object]:
    pytest.importorskip("atheris", reason="atheris is not installed (the dev extra, Linux)")
    command = [
        sys.executable, "-m", "fuzz.run", "--parser", parser, "--runs", str(runs),
        "--workdir", str(tmp_path / "work"), "--crashers", str(tmp_path / "crashers"),
        "-seed=1",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary: dict[str, object] = json.loads(done.stdout)
    saved = sorted(p.name for p in (tmp_path / "crashers").glob("*") if p.suffix != ".txt")
    assert summary["inputs"] >= runs  # type: ignore[operator]
    assert summary["foreign_exceptions"] == 0, (
        f"{summary['signatures']}; inputs kept in {tmp_path / 'crashers'}: {saved}; "
        "copy them to fuzz/crashers/<parser>/ to make them regression tests"
    )
    assert summary["worker_deaths"] == {}, saved
    return summary


@pytest.mark.parametrize("parser", PARSERS)
def test_smoke_fuzz(parser: str, tmp_path: Path) -> None:
    _fuzz(parser, 300, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("parser", PARSERS)
def test_longer_fuzz(parser: str, tmp_path: Path) -> None:
    _fuzz(parser, 20_000, tmp_path)


# -- docs/security.md --------------------------------------------------------------------------


LIMIT_MODULES = (
    "weightstore.burnpack._layout",
    "weightstore.safetensors._layout",
    "weightstore.gguf._layout",
    "weightstore.pytorch_reader._layout",
    "weightstore.container._reader",
    "weightstore.sets._index",
    "weightstore.dcp._index",
    "weightstore.dcp._tiling",
    "weightstore.dcp._values",
    "weightstore.cli._hash",
    "weightstore.adapters._known_models",
)


def _spellings(value: int) -> set[str]:
    """How the page may write `value`: with thousands separators, or as 2^k (- 1)."""
    forms = {f"{value:,}"}
    for exponent in range(1, 65):
        if value == 2**exponent:
            forms.add(f"2^{exponent}")
        if value == 2**exponent - 1:
            forms.add(f"2^{exponent} - 1")
    return forms


def test_security_page_lists_every_limit() -> None:
    import importlib

    page = (REPO / "docs" / "security.md").read_text()
    for module_name in LIMIT_MODULES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if not name.startswith("MAX_") or type(value) is not int:
                continue
            # Formats share names (`MAX_TENSOR_COUNT`): one of the places must show this value.
            spots = [found.start() for found in re.finditer(re.escape(f"`{name}`"), page)]
            assert spots, f"docs/security.md does not name {module_name}.{name}"
            forms = _spellings(value)
            assert any(form in page[at : at + 160] for at in spots for form in forms), (
                f"docs/security.md shows {name} without its value {value:,} ({module_name})"
            )


def test_workers_import_no_machine_learning_framework() -> None:
    # A worker imports every weightstore module but those in `_NOT_IMPORTED`; one of them
    # importing torch or jax at module level makes every fuzz run ten times slower.
    import ast
    import pkgutil

    import weightstore
    from fuzz.run import _NOT_IMPORTED

    heavy = {"torch", "jax", "jaxlib", "flax"}
    offenders = []
    for module in pkgutil.walk_packages(weightstore.__path__, "weightstore."):
        if module.name in _NOT_IMPORTED:
            continue
        spec = module.module_finder.find_spec(module.name.rpartition(".")[2], None)
        assert spec is not None and spec.origin is not None
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        for node in tree.body:  # module level only: imports inside functions run when called
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            offenders += [module.name for name in names if name.split(".")[0] in heavy]
    assert offenders == []
