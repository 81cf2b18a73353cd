"""`weightstore convert SRC DST`: any readable format into any writable one, one tensor at a time.

The conversion is the library's own save, ``save_into(source, destination_store)``: the source
is `Store.from_file(SRC)` (format from its bytes), the destination a store of the format DST's
extension or ``--format`` names, and every flag is a builder of one of the two stores:

    --top-level-key            source   PyTorch: the tensors under one key (a dotted path)
    --allow-objects            source   PyTorch: read a pickle naming globals that run code
    --dequantize               source   quantized tensors read as their values (`with_dequantize`)
    --filter, --remap          dest     which tensors, renamed how (source names; rules chain)
    --to-burn, --from-burn     dest     `PyTorchToBurnAdapter` / `BurnToPyTorchAdapter`
    --half, --dtype            dest     `HalfPrecisionAdapter` / `FloatCastAdapter`
    --quantize                 dest     GGUF: float matrices written as Q8_0 or Q4_0 blocks
    --metadata, --overwrite    dest     pairs written (after the source's own), replace a file

Tensors are read as the writer reaches them, so peak memory is about the largest tensor (twice
that when an adapter casts or transposes it); from a PyTorch checkpoint that holds whatever its
size, as each tensor's mapped pages are released once written (`_releasing_reader`). List
indices keep their numbers (the PyTorch store's contiguous renumbering is turned off): a
converted file loads into the model the source came from.

A conversion that would write no tensor (a ``--top-level-key`` holding none, a ``--filter``
matching none) is refused, as a load that loads nothing is. A checkpoint read whole whose
tensors sit under several top-level keys (weights and optimizer state) is converted whole with
a warning that names the keys and suggests ``--top-level-key``; one holding a user's classes
(a whole-module save) converts with a warning, and one whose pickle names globals that would
run code is refused unless ``--allow-objects`` (`weightstore.pytorch_reader._policy`).

The layout and half-precision adapters act by the type of the module owning each tensor, which
a file does not record; the library infers it from names and shapes
(`weightstore.adapters.assign_module_types`, as a model-free `save_into` does), and
``--module-type PATTERN=TYPE`` says it where inference cannot (`weightstore.cli._modules`). A
local SRC's ``config.json`` beside it types a Hugging Face model's layers by name.

A quantized tensor stored as several (FP8 codes and their scales, an MXFP4 pair) is copied
part by part, byte for byte, unless ``--dequantize`` asks for its values: then it is written
as one float tensor under its logical name. Where DST cannot hold the parts (GGUF, or a torch
quantized tensor's scales, which live in its pickle) the store refuses, naming the flag.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from weightstore import formats, save_into
from weightstore.adapters import (
    Adapter,
    BurnToPyTorchAdapter,
    FloatCastAdapter,
    HalfPrecisionAdapter,
    ModelConfig,
    PyTorchToBurnAdapter,
)
from weightstore.bridge import ModelFreeSource, source_for
from weightstore.cli._errors import EXIT_BAD_INPUT, EXIT_OK, about, print_error, print_warning
from weightstore.cli._keys import class_warning, keys_text, suggested_key, tensor_keys
from weightstore.cli._layout import add_layout_flags, layout_of
from weightstore.cli._modules import typed_for_command
from weightstore.cli._open import storage_options_of
from weightstore.cli._progress import Progress
from weightstore.cli._text import plural, printable
from weightstore.cli._training import training_group
from weightstore.errors import InvalidOptionError
from weightstore.formats import ContainerFormat
from weightstore.io import is_url
from weightstore.snapshot import TensorSnapshot, stored_blocks
from weightstore.stores import Store

__all__ = ["DTYPE_CHOICES", "QUANTIZE_CHOICES", "add_parser", "parse_pair", "run"]

DTYPE_CHOICES: Final = {"bf16": "BF16", "f16": "F16", "f32": "F32"}
"""``--dtype`` spellings and the weightstore dtype each casts floats to."""
QUANTIZE_CHOICES: Final = {"q8_0": "Q8_0", "q4_0": "Q4_0"}
"""``--quantize`` spellings and the ggml type the GGUF store writes float matrices in."""

# Pairs that describe the file being written, not its contents: the destination sets them
# (``format`` from the source's own, when it names a framework). A set's ``total_size`` and
# set id describe the source set, not what is written.
_WRITER_METADATA: Final = frozenset(
    {"format", "producer", "version", "total_size", "weightstore.set_id"}
)
# The flags given as A=B: (flag, metavar, split at the last "=", help).
_PAIR_FLAGS: Final = (
    ("--remap", "PATTERN=REPLACEMENT", True, "rename (repeatable; rules chain)"),
    ("--module-type", "PATTERN=TYPE", True, "owner of matching tensors (repeatable)"),
    ("--metadata", "KEY=VALUE", False, "a metadata pair (repeatable)"),
)


def parse_pair(text: str, what: str, *, split_last: bool) -> tuple[str, str]:
    """``A=B`` as ``(A, B)``, split at the last ``=`` (a regex may hold ``(?<=``) or the first
    (a metadata value may hold ``=``).

    Raises:
        argparse.ArgumentTypeError: no ``=``, or an empty left side.
    """
    left, sep, right = text.rpartition("=") if split_last else text.partition("=")
    if not sep or not left:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return left, right


def _pair(what: str, split_last: bool) -> Callable[[str], tuple[str, str]]:
    return lambda text: parse_pair(text, what, split_last=split_last)


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``convert`` on the subcommand table `commands`."""
    parser = commands.add_parser(
        "convert", parents=[common], help="convert a file to burnpack, SafeTensors or GGUF"
    )
    parser.add_argument("src", metavar="SRC", help="a file, or a sharded set (directory or index)")
    parser.add_argument("dst", metavar="DST", help="the file to write (.bpk, .safetensors, .gguf)")
    writable = [fmt.name for fmt in formats.FORMATS if fmt.writable]
    parser.add_argument("--format", choices=writable, help="DST's format (default: extension)")
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument("--to-burn", action="store_true", help="torch layout into Burn's")
    layout.add_argument("--from-burn", action="store_true", help="Burn layout into torch's")
    add_layout_flags(parser, "rewrite fused tensors")
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument("--half", action="store_true", help="F32 <-> F16 (not BatchNorm)")
    precision.add_argument("--dtype", choices=list(DTYPE_CHOICES), help="cast every float")
    parser.add_argument(
        "--quantize",
        choices=list(QUANTIZE_CHOICES),
        type=str.lower,
        help="GGUF DST: write float tensors of 2+ dims whose rows are whole 32-element blocks "
        "as Q8_0 or Q4_0 blocks (norms, biases and vectors stay as they are)",
    )
    parser.add_argument(
        "--dequantize",
        choices=list(DTYPE_CHOICES),
        type=str.lower,
        help="write each quantized tensor (FP8, MXFP4, NVFP4, int-packed groups, torch "
        "quantized tensors, Burn QFloat) as its values in this dtype, under its logical name "
        "(default: copy its stored parts as they are)",
    )
    parser.add_argument(
        "--filter", metavar="REGEX", action="append", help="keep matching names (repeatable: any)"
    )
    for flag, metavar, split_last, text in _PAIR_FLAGS:
        kind = _pair(metavar, split_last)
        parser.add_argument(flag, metavar=metavar, action="append", type=kind, help=text)
    parser.add_argument(
        "--top-level-key", metavar="KEY", help="PyTorch: tensors under KEY (a.b: nested)"
    )
    parser.add_argument(
        "--allow-objects",
        action="store_true",
        help="PyTorch: read a pickle naming globals that would run code (os.system, ...)",
    )
    parser.add_argument(
        "--max-shard-size",
        metavar="SIZE",
        help="write DST as a sharded set (a directory) of shards up to SIZE (5GB = 5 x 10^9), "
        "in the format DST's extension or --format names (x.bpk: burnpack), else SafeTensors",
    )
    parser.add_argument(
        "--variant", metavar="NAME", help="a set's variant (model.NAME-00001-of-00002...)"
    )
    parser.add_argument(
        "--digests",
        metavar="ALG",
        nargs="?",
        const="",
        help="write each tensor's digest into DST's metadata (docs/integrity.md); ALG: "
        "xxh3_128 (default with the integrity extra, else sha256), blake3, sha256, blake2b",
    )
    parser.add_argument(
        "--with-optimizer",
        action="store_true",
        help="a training checkpoint (DCP): write its optimizer state and the rest too "
        "(default: the model's tensors only)",
    )
    parser.add_argument(
        "--from",
        dest="weights_from",
        choices=("fp32", "model-states"),
        help="a DeepSpeed ZeRO checkpoint: write the fp32 master weights (default) or the model "
        "states' weights in the training dtype (stages 1 and 2)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Convert ``args.src`` into ``args.dst``; prints what was written."""
    fmt = _destination_format(args.dst, args.format, _writes_set(args))
    adapter = _adapter(args)
    storage = storage_options_of(args)
    with about(args.src):
        opened = Store.from_file(args.src, storage_options=storage)
        if args.allow_objects and "allow_objects" in opened.format.store_options:
            opened = opened.allow_objects()
        if args.dequantize is not None:
            opened = opened.with_dequantize(args.dequantize)
        if args.weights_from is not None:
            opened = _with_weights_from(opened, args.weights_from)
        if args.io != "auto":
            chosen = opened.with_io(args.io)
            opened.close()  # the copy reads through a reader of its own
            opened = chosen
        source_store = opened.map_indices_contiguous(False)
        if args.top_level_key is not None:
            source_store = source_store.with_top_level_key(args.top_level_key)
            opened.close()  # the keyed copy reads through a reader of its own
    with source_store:  # one reader of SRC, shared by the listing, the metadata and the reads
        with about(args.src):
            source = source_for(source_store)
            assert isinstance(source, ModelFreeSource)  # a store always reads as one
            metadata = _carried_metadata(source_store, fmt)
            reader = _releasing_reader(source_store, args)
            read = source.snapshots() if reader is None else _streamed(source.snapshots(), reader)
            snapshots = _model_only(_owned(read, adapter, args), source_store, args)
            _warn_about_source(source_store, args)
            choice = source_store.io_choice()
            if choice is not None and (choice.mode != "mmap" or args.io != "auto"):
                print(f"reading {printable(args.src)} by {choice}")  # the unusual path, told
        return _write(args, fmt, adapter, metadata, source, snapshots)


def _with_weights_from(store: Store, weights: str) -> Store:
    """`store` reading a ZeRO checkpoint's `weights` (``--from``).

    Raises:
        InvalidOptionError: the source is no ZeRO checkpoint.
    """
    from weightstore.stores import PytorchStore

    if not isinstance(store, PytorchStore):
        raise InvalidOptionError(
            f"--from applies to a DeepSpeed ZeRO checkpoint, not {store.format.title} files",
            option="from",
        )
    chosen = store.with_weights_from(weights)
    store.close()  # the copy reads through a reader of its own
    return chosen


def _model_only(
    snapshots: list[TensorSnapshot], store: Store, args: argparse.Namespace
) -> list[TensorSnapshot]:
    """A training checkpoint's model tensors, the optimizer state and the rest left out (and
    said so), unless ``--with-optimizer``; any other source's snapshots as they are."""
    from weightstore.dcp._reader import DcpReader

    if args.with_optimizer or not isinstance(store.reader(), DcpReader):
        return snapshots
    kept = [s for s in snapshots if training_group(s.full_path) == "model"]
    if kept and len(kept) < len(snapshots):
        left = len(snapshots) - len(kept)
        print_warning(
            f"{args.src}: writing the model's tensors only, leaving out "
            f"{plural(left, 'tensor')} of optimizer state and the rest; --with-optimizer "
            "writes them too"
        )
        return kept
    return snapshots


def _warn_about_source(store: Store, args: argparse.Namespace) -> None:
    """Warn when a checkpoint holds a user's classes, or, read whole, holds tensors under
    several top-level keys (weights and optimizer state would be converted together)."""
    reader = store.reader()
    scan = getattr(reader, "scan", None)
    if scan is None:  # not a single PyTorch checkpoint
        return
    warning = class_warning(scan())
    if warning is not None:
        print_warning(f"{args.src}: {warning}")
    if args.top_level_key is None:
        counts = tensor_keys(reader)
        if counts:
            print_warning(
                f"{args.src}: converting the tensors of several top-level keys: "
                f"{keys_text(counts)}; to convert one, pass --top-level-key "
                f"{suggested_key(counts)}"
            )


def _releasing_reader(store: Store, args: argparse.Namespace) -> Any:
    """The store's reader when it can `release` a tensor's pages (PyTorch's), else None. The
    pages of a mapped file that the writer has read count in the process's resident size
    until the file is unmapped, so a conversion that kept them would peak at the file's size;
    releasing each tensor once written, with no copy, keeps about one resident. (A
    ``mode="pread"`` reader would also, at one more copy per tensor: 2-4x the CPU time of the
    mapped read.) A URL is read by range requests into arrays of their own: nothing mapped."""
    if is_url(args.src) or not store.format.reader_releases_pages:
        return None
    reader = store.reader()  # a set's reader has no `release`: its pages stay resident
    return reader if callable(getattr(reader, "release", None)) else None  # (clean, droppable)


def _streamed(snapshots: Sequence[TensorSnapshot], reader: Any) -> list[TensorSnapshot]:
    """The store's snapshots (its names, order and checks), each read through `reader`. The
    source store neither remaps nor renumbers, so its names are the reader's. The writer
    asks for one tensor at a time, so when it asks for one it is done with the one before:
    that one is released first. A quantized tensor read as its values (``--dequantize``)
    keeps the store's own load, which decodes it; the reader's `get` would refuse it."""
    read: list[str] = []

    def load(name: str) -> np.ndarray[Any, Any]:
        while read:
            reader.release(read.pop())
        read.append(name)
        array: np.ndarray[Any, Any] = reader.get(name)
        return array

    return [
        s if stored_blocks(s) is not None else s.replace(load=functools.partial(load, s.full_path))
        for s in snapshots
    ]


def _write(
    args: argparse.Namespace,
    fmt: ContainerFormat,
    adapter: Adapter | None,
    metadata: dict[str, Any],
    source: ModelFreeSource,
    snapshots: list[TensorSnapshot],
) -> int:
    """Save `snapshots` into DST (the save half of `run`); prints what was written."""
    store = _destination(args, fmt, adapter, metadata)
    kept = [s for s in snapshots if store.options.filter.matches(s.full_path, s.container_path)]
    if not kept:
        print_error(f"{args.src}: nothing to convert: {_why_nothing(args, snapshots)}")
        return EXIT_BAD_INPUT
    total = sum(s.nbytes for s in kept)
    if is_url(args.src):  # fetch what is written in large, concurrent batches
        from weightstore.stores._remote_plan import announce_reads

        announce_reads(kept)
    with Progress(total, args.src, quiet=args.quiet) as progress:
        counted = tuple(_counted(s, progress) for s in snapshots)
        with about(args.dst):
            written = save_into(source.replace(items=counted), store)
    size = _written_size(written, storage_options_of(args)) if written else 0
    print(f"wrote {printable(str(written))} ({fmt.name}): {plural(len(kept), 'tensor')}, "
          f"{size:,} bytes")  # fmt: skip
    return EXIT_OK


def _why_nothing(args: argparse.Namespace, snapshots: Sequence[TensorSnapshot]) -> str:
    """Why a conversion would write no tensor, for its error line."""
    if snapshots:
        return f"--filter matches none of its {plural(len(snapshots), 'tensor')}"
    if args.top_level_key is not None:
        return (
            f"top-level key {args.top_level_key!r} holds no tensors (inspect lists its "
            "objects and the keys that hold tensors)"
        )
    return "it holds no tensors"


def _writes_set(args: argparse.Namespace) -> bool:
    """Whether DST is a sharded set: ``--max-shard-size`` given, or DST a directory (for a
    URL, one ending in ``/``)."""
    if is_url(args.dst):
        return args.max_shard_size is not None or args.dst.endswith("/")
    return args.max_shard_size is not None or os.path.isdir(args.dst)


def _written_size(written: str, storage_options: dict[str, Any] | None) -> int:
    """Bytes a save wrote: the file's, or for a set's index every file the index names."""
    size = _size_of_url if is_url(written) else _size_of_file
    if not written.endswith(".json"):
        return size(written, storage_options)
    from weightstore.sets import read_index

    directory = os.path.dirname(written)
    index = read_index(written, storage_options=storage_options)
    shards = set(index.weight_map.values())
    return size(written, storage_options) + sum(
        size(os.path.join(directory, shard), storage_options) for shard in shards
    )


def _size_of_file(path: str, storage_options: dict[str, Any] | None) -> int:
    return os.path.getsize(path)


def _size_of_url(url: str, storage_options: dict[str, Any] | None) -> int:
    from weightstore.io._fs import filesystem_for

    fs, path = filesystem_for(url, storage_options)
    return int(fs.size(path))


def _destination_format(dst: str, name: str | None, writes_set: bool) -> ContainerFormat:
    """The format DST is written in: ``--format``, else its extension's; a set (a directory)
    is its extension's too (``x.bpk/``: burnpack shards), and SafeTensors, the layout people
    download, when neither names one. A set whose ``--format`` and extension disagree is
    refused: which one was meant cannot be told."""
    if writes_set:
        named = formats.format_for_path(dst.rstrip("/"))
        if name and named is not None and named.name != name:
            raise InvalidOptionError(
                f"{dst}: the extension names {named.title} but --format {name}; give one, "
                "or a directory name whose extension agrees", option="format",
            )  # fmt: skip
        name = name or (named.name if named is not None else "safetensors")
    fmt = formats.format_named(name) if name else formats.format_for_path(dst)
    names = [f.name for f in formats.FORMATS if f.writable]
    if fmt is None:
        raise InvalidOptionError(
            f"{dst}: the extension names no format; use .bpk, .safetensors or .gguf, or "
            "--format " + "|".join(names), option="format"
        )  # fmt: skip
    if not fmt.writable:
        raise InvalidOptionError(
            f"{dst}: {fmt.title} files cannot be written; convert to {', '.join(names)}",
            option="format", format=fmt.name,
        )  # fmt: skip
    return fmt


def _adapter(args: argparse.Namespace) -> Adapter | None:
    """The layout adapter, then the precision adapter, then the layout rules, chained; None
    when none is asked."""
    parts: list[Adapter] = []
    if args.to_burn:
        parts.append(PyTorchToBurnAdapter())
    if args.from_burn:
        parts.append(BurnToPyTorchAdapter())
    if args.half:
        parts.append(HalfPrecisionAdapter())
    if args.dtype:
        parts.append(FloatCastAdapter.to(DTYPE_CHOICES[args.dtype]))
    layout = layout_of(args)  # layout rules run after the per-tensor steps, as in every save
    if layout is not None:
        parts.append(layout)
    if not parts:
        return None
    adapter = parts[0]
    for part in parts[1:]:
        adapter = adapter.chain(part)
    return adapter


def _flags(args: argparse.Namespace) -> str:
    """The module-typed flags given, as the user typed them (for messages)."""
    asked = [("--to-burn", args.to_burn), ("--from-burn", args.from_burn), ("--half", args.half)]
    return " with ".join(flag for flag, given in asked if given)


def _owned(
    snapshots: Sequence[TensorSnapshot], adapter: Adapter | None, args: argparse.Namespace
) -> list[TensorSnapshot]:
    """Snapshots with their owning module's type, when an adapter decides by it; every one
    gets a type (``Unknown`` where none applies), as module-typed adapters require."""
    if not _flags(args):
        return list(snapshots)
    assert adapter is not None
    config = None if is_url(args.src) else ModelConfig.beside(args.src)
    return typed_for_command(snapshots, adapter, args.module_type or (), _flags(args), config)


def _carried_metadata(store: Store, destination: ContainerFormat) -> dict[str, Any]:
    """The source's own metadata pairs, less those describing the writer. A read-only format's
    `metadata` (PyTorch's) is facts about its layout, not pairs to carry. Typed values (GGUF's)
    stay typed into a format that types them; into a string format their scalars become
    strings and their arrays (a tokenizer's vocabulary) stay behind."""
    if not store.format.writable:
        return {}
    pairs: dict[str, Any]
    if store.format.typed_metadata:
        typed = store.read_typed_metadata()
        if destination.typed_metadata:
            pairs = dict(typed)
        else:
            pairs = {k: str(v.value) for k, v in typed.items() if not isinstance(v.value, list)}
    else:
        pairs = store.read_metadata()
    return {k: v for k, v in pairs.items() if k not in _WRITER_METADATA}


def _destination(
    args: argparse.Namespace,
    fmt: ContainerFormat,
    adapter: Adapter | None,
    metadata: dict[str, Any],
) -> Store:
    """The store DST is written through, every option of the command line set on it; a bad
    option's error names the flag."""
    store_type = next(s for s in Store.__subclasses__() if s.FORMAT is fmt)
    with about(args.dst):
        storage = storage_options_of(args)
        store = store_type.from_file(args.dst, storage_options=storage).overwrite(args.overwrite)
    if args.max_shard_size is not None:
        with about("--max-shard-size"):
            store = store.with_max_shard_size(args.max_shard_size)
    if args.variant is not None:
        with about("--variant"):
            store = store.with_variant(args.variant)
    if args.digests is not None:
        with about("--digests"):
            store = store.with_digests(args.digests or None)
    if args.quantize is not None:
        with about("--quantize"):
            store = store.with_quantize(QUANTIZE_CHOICES[args.quantize])
    with about("--filter"):
        store = store.with_regexes(args.filter or ())
    with about("--remap"):
        for pattern, replacement in args.remap or ():
            store = store.with_key_remapping(pattern, replacement)
    if adapter is not None:
        store = store.with_to_adapter(adapter)
    for key, value in [*metadata.items(), *(args.metadata or ())]:
        store = store.with_metadata(key, value)
    return store


def _counted(snapshot: TensorSnapshot, progress: Progress) -> TensorSnapshot:
    """`snapshot`, counting its bytes on `progress` when the writer reads it."""
    load = snapshot.load

    def counted() -> np.ndarray[Any, Any]:
        array = load()
        progress.advance(snapshot.nbytes)
        return array

    stored = stored_blocks(snapshot)  # the counter reads the same values
    return snapshot.replace(
        load=counted, stored=None if stored is None else stored.rebound(counted)
    )
