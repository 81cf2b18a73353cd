"""The index fuzz targets: one index's bytes in a directory of real and hostile neighbours.

An index is never read alone: it names files beside it, and what the readers do with those
names is what a hostile index attacks. So each process builds one scratch directory per index
parser, once, holding

- the files a valid index names: two SafeTensors shards of a Hugging Face set and two of a
  weightstore set (with a set id) for ``set-index``; four burnpack rank files of a DCP
  checkpoint for ``dcp-index``;
- neighbours an index may name by mistake or malice (`HOSTILE_NEIGHBOURS`): a symlink loop,
  a dangling symlink, a symlink out of the directory, a symlink to a shard, a FIFO, a socket,
  a directory, an empty file, a git-lfs pointer, a file of another format;

and each input is written as the directory's index (``model.safetensors.index.json`` or
``dcp.index.json``). The input then goes through what a user does: `open_reader` on the index
and on the directory, every tensor read whole and the first few sliced, `metadata()`, the
store's `keys()`, `read_metadata()` and `set_report()`, a DCP checkpoint's stored values, and the
CLI's ``inspect``, ``inspect --json`` and ``verify``. Findings are as for the container targets
(`fuzz.targets`): a foreign exception, a CLI exit code other than 0, 1 or 2, or a descriptor or
mapping of any file in the directory left open.

The seeds (`seed_indexes`) are indexes of these same directories, so the fuzzer starts from
indexes that read cleanly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np

from weightstore import Store, burnpack, open_reader, safetensors
from weightstore.dcp._index import (
    CHUNKS_KEY,
    DCP_INDEX_NAME,
    DcpChunk,
    DcpTensor,
    dcp_index_bytes,
    rank_file_name,
)
from weightstore.dcp._reader import open_dcp
from weightstore.dtypes import from_numpy
from weightstore.entry import TensorEntry
from weightstore.errors import WeightstoreError
from weightstore.sets._index import SET_ID_KEY

__all__ = [
    "HOSTILE_NEIGHBOURS",
    "INDEX_NAMES",
    "INDEX_PARSERS",
    "exercise_index",
    "index_directory",
    "seed_indexes",
]

INDEX_PARSERS: Final = ("set-index", "dcp-index")
INDEX_NAMES: Final = {"set-index": "model.safetensors.index.json", "dcp-index": DCP_INDEX_NAME}
SET_ID: Final = "5e7" + "0" * 29
DCP_SET_ID: Final = "fedcba9876543210fedcba9876543210"
HF_SHARDS: Final = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
WS_SHARDS: Final = ("ws-00001-of-00002.safetensors", "ws-00002-of-00002.safetensors")
HOSTILE_NEIGHBOURS: Final = (
    "loop.safetensors",  # a symlink to itself
    "dangling.safetensors",  # a symlink to nothing
    "outside.safetensors",  # a symlink to a file outside the directory
    "inside.safetensors",  # a symlink to a shard in the directory
    "fifo.safetensors",  # a FIFO: opening it for reading blocks until a writer comes
    "socket.safetensors",  # a Unix socket
    "subdir.safetensors",  # a directory
    "empty.safetensors",  # zero bytes
    "lfs.safetensors",  # a git-lfs pointer
    "other.bpk",  # a burnpack file among SafeTensors shards
)


# -- the directories ------------------------------------------------------------------------------


def _entries(arrays: dict[str, np.ndarray[Any, Any]]) -> list[TensorEntry]:
    return [TensorEntry.from_array(name, array) for name, array in arrays.items()]


def _set_contents() -> dict[str, dict[str, np.ndarray[Any, Any]]]:
    matrix = np.arange(12, dtype=np.float32).reshape(4, 3)
    return {
        HF_SHARDS[0]: {"embed.weight": matrix, "layers.0.weight": matrix + 1},
        HF_SHARDS[1]: {"layers.0.bias": np.ones(3, "f2"), "head.weight": np.zeros((0, 3), "f4")},
        WS_SHARDS[0]: {"a": np.arange(6, dtype=np.int64).reshape(2, 3)},
        WS_SHARDS[1]: {"b": np.array(2.5, "f4"), "c": np.array([True, False])},
    }


def _write_set(directory: Path) -> None:
    for name, arrays in _set_contents().items():
        metadata = {"format": "pt"} if name in HF_SHARDS else {SET_ID_KEY: SET_ID}
        safetensors.write_file(directory / name, _entries(arrays), metadata, overwrite=True)


Grid = list[tuple[int, tuple[int, ...], tuple[int, ...]]]  # (rank, offsets, sizes)


def _dcp_contents() -> dict[str, tuple[np.ndarray[Any, Any], Grid]]:
    matrix = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    return {
        "model.w": (
            matrix,
            [(0, (0, 0), (4, 3)), (1, (0, 3), (4, 2)), (2, (4, 0), (3, 3)), (0, (4, 3), (3, 2))],
        ),
        "model.v": (
            np.arange(9, dtype=np.int16) - 4,
            [(1, (0,), (5,)), (2, (5,), (0,)), (0, (5,), (4,))],
        ),
        "step": (np.array(7, np.int64), [(2, (), ())]),
        "none": (np.zeros((4, 0), np.float32), [(0, (0, 0), (4, 0))]),
        "st.x": (np.arange(6, dtype=np.float64).reshape(3, 2), [(3, (0, 0), (3, 2))]),
    }


def _dcp_tensors() -> dict[str, DcpTensor]:
    tensors = {}
    for fqn, (array, grid) in _dcp_contents().items():
        chunks, seen = [], set()
        for rank, offsets, sizes in grid:
            file = _rank_file(rank)
            name = fqn if (file, fqn) not in seen else f"{fqn}@{list(offsets)}"
            seen.add((file, fqn))
            chunks.append(DcpChunk(file, name, offsets, sizes))
        tensors[fqn] = DcpTensor(from_numpy(array.dtype), array.shape, chunks)
    return tensors


def _rank_file(rank: int) -> str:
    return rank_file_name(rank, DCP_SET_ID, "bpk")


def _write_dcp(directory: Path) -> None:
    per_file: dict[str, list[TensorEntry]] = {}
    chunks_json: dict[str, dict[str, Any]] = {}
    contents = _dcp_contents()
    for fqn, tensor in _dcp_tensors().items():
        array = contents[fqn][0]
        for chunk in tensor.chunks:
            region = tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes, strict=True))
            entry = TensorEntry.from_array(chunk.name, np.array(array[region]))
            per_file.setdefault(chunk.file, []).append(entry)
            chunks_json.setdefault(chunk.file, {})[chunk.name] = {
                "fqn": fqn,
                "offsets": list(chunk.offsets),
            }
    for file, entries in per_file.items():
        metadata = {SET_ID_KEY: DCP_SET_ID, CHUNKS_KEY: json.dumps(chunks_json[file])}
        burnpack.write_file(directory / file, entries, metadata, overwrite=True)


def _write_neighbours(directory: Path) -> None:
    """`HOSTILE_NEIGHBOURS`, created beside the real files (skipped where the system can't)."""
    outside = directory.parent / (directory.name + ".outside")
    outside.write_bytes(b"not in the directory\n")
    first_shard = next(p.name for p in sorted(directory.iterdir()) if p.is_file())
    links = {
        "loop.safetensors": "loop.safetensors",
        "dangling.safetensors": "nowhere.safetensors",
        "outside.safetensors": str(outside),
        "inside.safetensors": first_shard,
    }
    for name, target in links.items():
        os.symlink(target, directory / name)
    with contextlib.suppress(OSError, AttributeError):
        os.mkfifo(directory / "fifo.safetensors")
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as server:
        server.bind(str(directory / "socket.safetensors"))
    (directory / "subdir.safetensors").mkdir()
    (directory / "empty.safetensors").write_bytes(b"")
    (directory / "lfs.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 123\n"
    )
    arrays = {"w": np.ones((2, 2), "f4")}
    burnpack.write_file(directory / "other.bpk", _entries(arrays), overwrite=True)


_DIRECTORIES: dict[str, Path] = {}


def index_directory(parser: str) -> Path:
    """This process's scratch directory for `parser` (built on first use, removed at exit)."""
    if parser not in _DIRECTORIES:
        from fuzz.targets import scratch_prefix

        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        root = Path(tempfile.mkdtemp(prefix=f"{scratch_prefix()}{parser}-", dir=folder))
        directory = root / "checkpoint"
        directory.mkdir()
        (_write_set if parser == "set-index" else _write_dcp)(directory)
        _write_neighbours(directory)
        import atexit

        atexit.register(shutil.rmtree, root, True)
        _DIRECTORIES[parser] = directory
    return _DIRECTORIES[parser]


# -- the seeds ------------------------------------------------------------------------------------


def _set_index(shards: tuple[str, ...], metadata: dict[str, Any]) -> bytes:
    contents = _set_contents()
    weight_map = {tensor: shard for shard in shards for tensor in contents[shard]}
    total = sum(a.nbytes for shard in shards for a in contents[shard].values())
    index = {"metadata": {"total_size": total, **metadata}, "weight_map": weight_map}
    return json.dumps(index, indent=2).encode()


def _dcp_index(values: dict[str, object], planner_data: object = None) -> bytes:
    tensors = _dcp_tensors()
    paths: dict[str, tuple[str | int, ...]] = {k: tuple(k.split(".")) for k in tensors}
    paths.update({k: tuple(k.split(".")) for k in values})
    return dcp_index_bytes(
        DCP_SET_ID,
        tensors,
        values,
        paths=paths,
        planner_data=planner_data,
        metadata={"run": "fuzz"},
        container="burnpack",
        dcp_version="1.0.0",
    )


def seed_indexes(parser: str, opaque: bytes | None = None) -> dict[str, bytes]:
    """Indexes that read cleanly in `index_directory(parser)`, by seed name. `opaque` is a
    ``torch.save`` payload to store as an opaque DCP value (the seeds of the PyTorch corpus)."""
    if parser == "set-index":
        return {
            "hf": _set_index(HF_SHARDS, {"format": "pt"}),
            "weightstore": _set_index(WS_SHARDS, {SET_ID_KEY: SET_ID}),
            "one-shard": _set_index(HF_SHARDS[:1], {}),
        }
    from weightstore.dcp._values import OpaqueValue

    values: dict[str, object] = {
        "lr": 0.5,
        "betas": (0.9, 0.99),
        "names": ["a", "b", None, True],
        "blob": b"\x00\xff",
        "table": {1: "one", "two": 2.0, (3, 4): [5]},
        "nan": float("nan"),
    }
    seeds = {"values": _dcp_index(values), "bare": _dcp_index({}), "planner": _dcp_index({}, [1])}
    if opaque is not None:
        seeds["opaque"] = _dcp_index({"saved": OpaqueValue(opaque)})
    return seeds


# -- the read paths -------------------------------------------------------------------------------


def _exercise_reader(reader: Any) -> None:
    """What the container targets do with an open reader (`fuzz.targets`), imported late:
    that module imports this one."""
    from fuzz.targets import _exercise_reader as exercise

    exercise(reader)


def _readers(index: str, directory: str) -> None:
    with contextlib.suppress(WeightstoreError), open_reader(index) as reader:
        _exercise_reader(reader)


def _directory_reader(index: str, directory: str) -> None:
    """A set's directory is found by listing it (its neighbours matter); a DCP directory is
    read as its index, which `_readers`, the store and the CLI all reach already."""
    with contextlib.suppress(WeightstoreError), open_reader(directory) as reader:
        _exercise_reader(reader)


def _store(directory: str) -> None:
    with contextlib.suppress(WeightstoreError), Store.from_file(directory) as store:
        store.keys()
        store.read_metadata()
        store.set_report()


def _dcp_values(directory: str) -> None:
    with contextlib.suppress(WeightstoreError), open_dcp(directory) as reader:
        reader.values()


_READ_PATHS: Final[dict[str, tuple[Callable[[str, str], None], ...]]] = {
    "set-index": (_readers, _directory_reader, lambda index, directory: _store(directory)),
    "dcp-index": (
        _readers,
        lambda index, directory: _store(directory),
        lambda index, directory: _dcp_values(directory),
    ),
}


def _held_under(directory: str, maps: bool) -> int:
    """Descriptors (and, with `maps`, mappings) this process holds of files in `directory`."""
    prefix = directory + os.sep
    count = 0
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
                    count += 1
    if maps:
        with contextlib.suppress(OSError), open("/proc/self/maps") as lines:
            count += sum(1 for line in lines if prefix in line)
    return count


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Set warnings (stray shards, ignored files) are what a user would see, not findings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def exercise_index(parser: str, data: bytes, cli: Callable[[str], None], maps: bool) -> None:
    """Run index `data` through every read path of `parser`, then `cli` on the checkpoint;
    foreign exceptions propagate. Raises `fuzz.targets.Finding` for a leaked descriptor."""
    from fuzz.targets import Finding

    directory = index_directory(parser)
    index = directory / INDEX_NAMES[parser]
    index.write_bytes(data)
    with _quiet():
        for read in _READ_PATHS[parser]:
            read(str(index), str(directory))
        cli(str(index) if parser == "set-index" else str(directory))
    import gc

    held = _held_under(str(directory), maps)
    if held and (gc.collect() or True) and _held_under(str(directory), maps):
        raise Finding("leak", "file handles", "descriptors or mappings stay open")
