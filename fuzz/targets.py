"""The fuzz targets: one input's bytes through every read path a parser has.

`exercise` writes the input to one scratch file per process and per parser, then runs the
format's reader in each read mode (mmap and pread; the PyTorch reader maps only), format
detection, `get` of every tensor, `get_slice` on the first few, `metadata()`, and the CLI's
``inspect`` and ``verify`` in-process (a GGUF file also `get_raw` and its typed metadata; a
SafeTensors file also `recognise` over its header and `dequantize_group` of each group). A
finding is anything
but a `WeightstoreError` escaping a reader, a CLI exit code other than 0, 1 or 2 (3 is
"internal error"), a failing CLI command whose stderr is not one ``weightstore: error:``
line (warnings aside), or a file descriptor or mapping of the input left open once everything
is closed. `check` raises `Finding` for one; the fuzz runner records it and goes on. The index
parsers (``set-index``, ``dcp-index``) run through `fuzz.index_targets` instead, with the same
findings.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import io
import json
import os
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from fuzz.index_targets import INDEX_PARSERS, exercise_index
from weightstore import cli, formats
from weightstore.burnpack import BurnpackReader
from weightstore.errors import InvalidOptionError, WeightstoreError
from weightstore.quantized import dequantize_group, recognise
from weightstore.quantized._hf_int import LAYOUT as INT_PACK
from weightstore.quantized._hf_int import resolve_int_pack
from weightstore.quantized._hf_slice import SLICED_LAYOUTS, slice_group
from weightstore.safetensors import SafetensorsReader

__all__ = [
    "CONTAINER_PARSERS",
    "COUNTS",
    "PARSERS",
    "Finding",
    "check",
    "exercise",
    "scratch_path",
    "scratch_prefix",
    "signature",
    "stderr_problem",
]

CONTAINER_PARSERS: Final = ("burnpack", "safetensors", "pytorch", "gguf")
PARSERS: Final = (*CONTAINER_PARSERS, *INDEX_PARSERS)
SUFFIX: Final = {
    "burnpack": ".bpk",
    "safetensors": ".safetensors",
    "pytorch": ".pt",
    "gguf": ".gguf",
}
SLICED_TENSORS: Final = 3  # get_slice on this many tensors per file; get reads every tensor
CLI_OK_CODES: Final = frozenset({0, 1, 2})  # ok, different/failed verification, bad input


class Finding(Exception):
    """An input made weightstore misbehave; `kind` names how (an exception class, an exit code,
    a leak) and `where` the innermost weightstore frame, so equal bugs share a `signature`."""

    def __init__(self, kind: str, where: str, detail: str) -> None:
        self.kind, self.where, self.detail = kind, where, detail
        super().__init__(f"{kind} at {where}: {detail}")


@dataclass(slots=True)
class _Scratch:
    path: str | None = None


_SCRATCH: dict[str, _Scratch] = {}


def scratch_path(parser: str) -> str:
    """The one file this process rewrites for each input of `parser` (removed at exit)."""
    scratch = _SCRATCH.setdefault(parser, _Scratch())
    if scratch.path is None:
        # /dev/shm where there is one: truncating a file on disk costs more than reading it.
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, scratch.path = tempfile.mkstemp(
            prefix=f"{scratch_prefix()}{parser}-", suffix=SUFFIX[parser], dir=folder
        )
        os.close(fd)
        import atexit

        atexit.register(_remove, scratch.path)
    return scratch.path


def scratch_prefix(pid: int | None = None) -> str:
    """How the scratch files of process `pid` (default: this one) start. libFuzzer ends its
    process with exit(), so atexit never runs in a fuzz worker; its supervisor removes them."""
    return f"weightstore-fuzz-{os.getpid() if pid is None else pid}-"


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def signature(err: BaseException) -> tuple[str, str]:
    """``(exception class, innermost frame under weightstore/)`` of a foreign exception."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if "weightstore" in f.filename and "/fuzz/" not in f.filename]
    if not (ours or frames):
        return type(err).__qualname__, "?"
    frame = (ours or frames)[-1]
    filename = frame.filename.split("src/weightstore/")[-1]
    return type(err).__qualname__, f"{filename}:{frame.lineno} ({frame.name})"


# -- the read paths -------------------------------------------------------------------------------


def _exercise_reader(reader: Any, skip: frozenset[str] = frozenset()) -> None:
    """Every read path of `reader`, for every tensor but those in `skip`."""
    names = [name for name in reader.names() if name not in skip]
    reader.names_in_file_order()
    for name in names:
        reader.descriptor(name)
        array = reader.get(name)
        array.sum() if array.dtype.kind in "biuf" else None
    for name in names[:SLICED_TENSORS]:
        sliced = reader.get_slice(name)
        sliced[...]
        shape = tuple(reader.descriptor(name).shape)
        if shape and shape[0] > 0:
            sliced[0:1]
            sliced[shape[0] - 1]
            for wrong in (shape[0], slice(0, 1, 0)):  # one past the end, a zero step
                with contextlib.suppress(WeightstoreError):  # a SliceError; nothing foreign
                    sliced[wrong]
            if len(shape) > 1 and shape[1] > 0:
                sliced[:, 0:1]
    metadata = reader.metadata()
    dict(metadata)
    repr(reader)


def _burnpack(path: str) -> None:
    for mode in ("mmap", "pread"):
        with contextlib.suppress(WeightstoreError), open_burnpack(path, mode=mode) as reader:
            for name, descriptor in reader.descriptors.items():
                if descriptor.dtype.kind == "q":  # before `get`, which refuses QFloat
                    with contextlib.suppress(WeightstoreError):
                        _exercise_part(reader, name, reader.get_dequantized(name))
            _exercise_reader(reader)
            reader.scalars  # noqa: B018 - parsed at open; touched so a lazy parse would run too


def _safetensors(path: str) -> None:
    for mode in ("mmap", "pread"):
        with contextlib.suppress(WeightstoreError), open_safetensors(path, mode=mode) as reader:
            if mode == "mmap":  # the arrays are the same in both modes; the groups once
                _exercise_groups(reader)
            _exercise_reader(reader)


COUNTS: Final[Counter[str]] = Counter()
"""How far inputs got down the quantized-group path (files with groups, groups recognised,
dequantized, refused); the fuzz runner adds them to its summary."""

_MAX_CONFIG_LEN: Final = 10_000  # characters of a metadata quantization_config parsed as JSON


def _configs(reader: Any) -> list[Any]:
    """None (recognition by names), then the ``quantization_config`` the file's metadata
    carries, as JSON, when it parses (a seed's own; any value, for the rules to refuse)."""
    text = reader.metadata().get("quantization_config")
    if not isinstance(text, str) or len(text) > _MAX_CONFIG_LEN:
        return [None]
    try:
        config = json.loads(text)
    except (ValueError, RecursionError):
        return [None]
    return [None, config] if isinstance(config, dict) else [None]


def _exercise_groups(reader: Any) -> None:
    """`recognise` over the header (name -> (dtype name, shape)) under each config, then each
    group's `dequantize_group` from the arrays `get` returns (an int-pack group first settled by
    `resolve_int_pack` from its weight_shape values, as a reader must); typed errors only."""
    header = {}
    for name in reader.names():
        descriptor = reader.descriptor(name)
        header[name] = (descriptor.dtype.name, tuple(descriptor.shape))
    for config in _configs(reader):
        try:
            groups, _plain = recognise(header, config)
        except WeightstoreError:
            COUNTS["recognise refused"] += 1
            continue
        COUNTS["groups recognised"] += len(groups)
        for group in groups:
            try:
                parts = {part: reader.get(part) for part in group.parts}
                if group.layout == INT_PACK:
                    shape = parts[group.companions["shape"]]
                    group = resolve_int_pack(group, shape, {p: header[p] for p in group.parts})
                values = dequantize_group(group, parts)
                with np.errstate(all="ignore"):  # infinities and NaN are values here
                    values.sum()
                COUNTS["groups dequantized"] += 1
            except WeightstoreError:
                COUNTS["dequantize refused"] += 1
                continue
            _exercise_slices(group, parts, values)


def _exercise_slices(group: Any, parts: dict[str, Any], values: Any) -> None:
    """A box of a dequantized group (the first half of its rows, the last two thirds of its
    columns) read as `slice_group` says, enclosed and on block edges: its values must be
    those of the whole dequantization, cut (a difference is a finding, not a refusal)."""
    if group.layout not in SLICED_LAYOUTS or not values.size:
        return
    shapes = {name: tuple(array.shape) for name, array in parts.items()}
    box = [(0, size) for size in values.shape]
    box[0] = (0, max(1, values.shape[0] // 2))
    box[-1] = (values.shape[-1] // 3, values.shape[-1])
    want = values[tuple(slice(a, b) for a, b in box)]
    for enclose in (True, False):
        try:
            cut = slice_group(group, shapes, box, enclose=enclose)
        except InvalidOptionError:
            COUNTS["slices refused"] += 1
            continue
        read = {n: parts[n] if key is None else parts[n][key] for n, key in cut.parts.items()}
        read.update({name: np.asarray(ints, np.int64) for name, ints in cut.derived})
        try:
            got = dequantize_group(cut.group, read)[cut.keep]
        except WeightstoreError as err:  # the whole dequantized, so its slice must
            raise AssertionError(f"slice {box} of {group.name!r} refused: {err}") from err
        if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
            raise AssertionError(f"slice {box} of {group.name!r} ({group.layout}) differs")
        COUNTS["slices checked"] += 1


def _exercise_part(reader: Any, name: str, values: Any) -> None:
    """`get_dequantized_part` of a tensor whose whole dequantization succeeded, on a box off
    the block edges (rows from a third on, every other column from the end): its values must
    be the whole's, cut; a refusal or a difference is a finding."""
    with np.errstate(all="ignore"):  # infinities and NaN are values here
        values.sum()
    if not values.ndim or not values.size:
        return
    box = (slice(values.shape[0] // 3, None), *[slice(None, None, -2)] * (values.ndim - 1))
    try:
        got = reader.get_dequantized_part(name, box)
    except WeightstoreError as err:
        raise AssertionError(f"part {box} of {name!r} refused: {err}") from err
    if not np.array_equal(got.view(np.uint8), np.ascontiguousarray(values[box]).view(np.uint8)):
        raise AssertionError(f"part {box} of {name!r} differs from the whole, cut")
    COUNTS["parts checked"] += 1


def _pytorch(path: str) -> None:
    from weightstore.pytorch_reader import PytorchReader

    with contextlib.suppress(WeightstoreError), PytorchReader.from_file(path) as reader:
        quantized = frozenset(name for name in reader.names() if reader.is_quantized(name))
        for name in quantized:  # each its own refusal: get refuses them all, by design
            with contextlib.suppress(WeightstoreError):
                reader.quantized_info(name)
                reader.quantized_codes(name)
                _exercise_part(reader, name, reader.get_dequantized(name))
        _exercise_reader(reader, quantized)
        reader.load_object()
        reader.others()


def _gguf(path: str) -> None:
    from weightstore.gguf import GgufReader

    for mode in ("mmap", "pread"):
        with contextlib.suppress(WeightstoreError), GgufReader.from_file(path, mode=mode) as reader:
            _exercise_gguf(reader)


def _exercise_gguf(reader: Any) -> None:
    """What only a GGUF reader has (raw blocks, typed metadata asked about key by key, a
    dequantization dtype), then the common paths, which dequantize quantized tensors."""
    quantized = frozenset(name for name in reader.names() if reader.descriptor(name).quantized)
    for name in reader.names():
        reader.ggml_type(name)
        reader.get_raw(name)
    for key in reader.metadata_keys():
        reader.metadata_type(key)
        reader.metadata_length(key)
    reader.metadata_typed()
    for name in sorted(quantized)[:1]:
        with contextlib.suppress(WeightstoreError):  # the right refusal for some types
            reader.get(name, dtype="BF16")
    _exercise_reader(reader)


_READERS: Final[dict[str, Callable[[str], None]]] = {
    "burnpack": _burnpack,
    "safetensors": _safetensors,
    "pytorch": _pytorch,
    "gguf": _gguf,
}


def _detect(path: str) -> None:
    with contextlib.suppress(WeightstoreError):
        fmt = formats.detect_format(path)
        with contextlib.suppress(WeightstoreError), fmt.open_file(path) as reader:
            reader.names()


_PARSER_FOR: Final = cli._parser_for  # what `cli.main` calls, with the command it will run


@functools.cache
def _cli_parser(command: str | None) -> argparse.ArgumentParser:
    return _PARSER_FOR(command)


def _cli(path: str) -> None:
    """``inspect``, ``inspect --json`` and ``verify`` of `path`."""
    for argv in (["inspect", path], ["inspect", "--json", path], ["verify", "--quiet", path]):
        out, err = io.StringIO(), io.StringIO()
        with _cached_cli_parser(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
        if code not in CLI_OK_CODES:
            last = err.getvalue().strip().splitlines()[-1:] or [""]
            raise Finding(f"cli exit {code}", f"weightstore {argv[0]}", last[0][:300])
        problem = stderr_problem(code, err.getvalue())
        if problem is not None:
            raise Finding("cli stderr", f"weightstore {argv[0]}", problem)


def stderr_problem(code: int, stderr: str) -> str | None:
    """What is wrong with what the CLI printed on stderr, or None: a failure (exit 1 or 2) says
    so in exactly one ``weightstore: error:`` line; any other line is a ``weightstore:
    warning:`` line (a traceback or a second error is a finding)."""
    lines = stderr.splitlines()
    errors = [line for line in lines if line.startswith("weightstore: error: ")]
    others = [line for line in lines if not line.startswith("weightstore: warning: ")]
    if code != 0 and (len(errors) != 1 or len(others) != 1):
        return f"exit {code} with {len(errors)} error lines: {stderr[-300:]!r}"
    if code == 0 and others:
        return f"exit 0 with other lines on stderr: {stderr[-300:]!r}"
    return None


@contextlib.contextmanager
def _cached_cli_parser() -> Iterator[None]:
    """Building the parser is four fifths of a CLI call and no input reaches it, so the target
    builds it once; put back afterwards, so that a test session sees the real function."""
    cli._parser_for = _cli_parser
    try:
        yield
    finally:
        cli._parser_for = _PARSER_FOR


# -- leaks ----------------------------------------------------------------------------------------


_MAPS_EVERY: Final = 32  # reading /proc/self/maps costs about as much as reading a file


def _held(path: str, maps: bool) -> int:
    """Open descriptors of `path` in this process, plus its mappings when `maps` is set."""
    count = 0
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}") == path:
                    count += 1
    if maps:
        with contextlib.suppress(OSError), open("/proc/self/maps") as lines:
            count += sum(1 for line in lines if line.rstrip().endswith(path))
    return count


_CALLS = [0]
open_burnpack: Final = BurnpackReader.from_file
open_safetensors: Final = SafetensorsReader.from_file


@contextlib.contextmanager
def _no_leaks(path: str, every_time: bool) -> Iterator[None]:
    """Raise `Finding` if `path` is still open or mapped (after a collection) once the body
    ends. Descriptors are checked each input, mappings every `_MAPS_EVERY`th (or always)."""
    yield
    _CALLS[0] += 1
    maps = every_time or _CALLS[0] % _MAPS_EVERY == 0
    if _held(path, maps) and (gc.collect() or True) and _held(path, maps):
        raise Finding("leak", "file handles", "descriptors or mappings of the input stay open")


# -- entry points ---------------------------------------------------------------------------------


def exercise(parser: str, data: bytes, *, thorough: bool = False) -> None:
    """Run `data` through every read path of `parser`; foreign exceptions propagate as is.

    `thorough` checks for leaked mappings after every input, not every `_MAPS_EVERY`th.
    """
    if parser in INDEX_PARSERS:
        _CALLS[0] += 1
        exercise_index(parser, data, _cli, thorough or _CALLS[0] % _MAPS_EVERY == 0)
        return
    path = scratch_path(parser)
    with open(path, "wb") as file:
        file.write(data)
    with _no_leaks(path, thorough):
        _READERS[parser](path)
        _detect(path)
        _cli(path)


def check(parser: str, data: bytes, *, thorough: bool = False) -> None:
    """As `exercise`, with any misbehaviour raised as one `Finding` (cause chained)."""
    try:
        exercise(parser, data, thorough=thorough)
    except Finding:
        raise
    except RecursionError as err:  # a signature from a 1,000-frame traceback costs seconds
        raise Finding("RecursionError", signature(err)[1], str(err)[:300]) from err
    except Exception as err:
        kind, where = signature(err)
        raise Finding(kind, where, str(err)[:300]) from err
