"""Opening a GGUF file by path, and a split model (llama.cpp's ``gguf-split``) as one reader.

A split model is several whole GGUF files, ``<prefix>-00001-of-00003.gguf`` and on: each holds
its own tensors and the pairs ``split.no`` (its place, 0-based), ``split.count`` and
``split.tensors.count`` (all the parts' tensors together); part 1 holds the model's metadata.
There is no index: the opened part's name says where the others are (`weightstore.gguf._names`)
and its ``split.count`` how many. `open_gguf` opens any part, then every part, and checks that
they make one model before handing out a `GgufSplitReader`: every part there, the same count
in each, each part's ``split.no`` matching its name, each tensor in one part only, and the
tensors adding up to ``split.tensors.count``. The reader's metadata is the model's (part 1's
without the ``split.*`` pairs), so a copy into one file is not mistaken for a part. A file
that is not split (no ``split.count``, or 0 or 1: what ``gguf-split --merge`` writes) opens as
a plain `GgufReader`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from weightstore.errors import (
    FileMissingError,
    MetadataError,
    SetError,
    SplitPartMissingError,
    TensorNotFoundError,
)
from weightstore.gguf._layout import (
    INTEGER_RANGES,
    SPLIT_COUNT_KEY,
    SPLIT_NO_KEY,
    SPLIT_TENSORS_KEY,
    GgufValue,
    ValueType,
)
from weightstore.gguf._names import file_name, parse_part_name, part_path
from weightstore.gguf._reader import GgufReader, GgufTensorInfo

if TYPE_CHECKING:
    import numpy as np

    from weightstore.container._slice import TensorSlice
    from weightstore.dtypes import DType
    from weightstore.gguf._reader import BlockSlice
    from weightstore.quantized import GgmlType

__all__ = ["GgufSplitReader", "open_gguf"]

_MAX_PARTS = INTEGER_RANGES[ValueType.UINT16][1]  # split.count is a uint16 in llama.cpp
_SPLIT_KEYS = frozenset({SPLIT_NO_KEY, SPLIT_COUNT_KEY, SPLIT_TENSORS_KEY})  # each part's own


def _model_key(key: str) -> str:
    """`key`, or `KeyError` for a pair that describes a part, not the model."""
    if key in _SPLIT_KEYS:
        raise KeyError(key)
    return key


def open_gguf(path: str | os.PathLike[str], **options: Any) -> GgufReader | GgufSplitReader:
    """A reader of the GGUF file at `path`; for a part of a split model, of the whole model.

    `options` go to every part's `GgufReader.from_file` (``mode``, ``storage_options``).

    Raises:
        SplitPartMissingError: a part of the split model is missing (named).
        SetError: the parts do not make one model (another part count, a ``split.no`` that
            is not the name's, a tensor in two parts, a tensor count that is not
            ``split.tensors.count``), or a split part whose name is not a part's name.
        MetadataError: a split pair that is no integer, or a part count past a uint16.
        as `GgufReader.from_file`, for any part.
    """
    filename = os.fspath(path)
    opened = GgufReader.from_file(filename, **options)
    try:
        count = _part_count(opened)
        if count is None:
            return opened
        return _open_split(opened, filename, count, options)
    except BaseException:
        opened.close()
        raise


class GgufSplitReader:
    """The parts of a split GGUF model, read as one file: tensors by name from whichever part
    holds them, the model's metadata from part 1 (without the parts' own ``split.*`` pairs).
    Follows `GgufReader`'s protocol (`get`, `get_raw`, `get_slice`, `ggml_type`, the
    ``metadata_*`` calls). Made by `open_gguf`, which has checked the parts; closing it closes
    every part.

    Attributes:
        path: part 1's path (what the model's metadata and messages name).
        parts: every part's path, in part order.
        part_readers: every part's `GgufReader`, in part order.
        version, byte_order, alignment: part 1's.

    Example:
        >>> with open_gguf("model-00002-of-00003.gguf") as model:  # doctest: +SKIP
        ...     model.parts[0]                      # 'model-00001-of-00003.gguf'
        ...     model.get("blk.30.ffn_up.weight")   # from whichever part holds it
    """

    def __init__(self, part_readers: Sequence[GgufReader]) -> None:
        """Take over the open `part_readers` (part order); `SetError` when two hold one name."""
        readers = tuple(part_readers)
        first = readers[0]
        self.part_readers = readers
        self.parts = tuple(str(reader.path) for reader in readers)
        self.path = first.path
        self.version, self.byte_order = first.version, first.byte_order
        self.alignment = first.alignment
        part_of: dict[str, GgufReader] = {}
        for reader in readers:
            for name in reader.descriptors:
                earlier = part_of.setdefault(name, reader)
                if earlier is not reader:
                    raise SetError(
                        f"the tensor is in two parts, {file_name(str(earlier.path))} and "
                        f"{file_name(str(reader.path))}; a split model holds each once",
                        path=self.path,
                        tensor=name,
                        shard=reader.path,
                    )
        self._part_of = part_of
        self.descriptors = {name: reader.descriptors[name] for name, reader in part_of.items()}

    # -- the parts ------------------------------------------------------------------------------

    def part_of(self, name: str) -> str:
        """The path of the part holding tensor `name`."""
        return str(self._reader_of(name).path)

    def _reader_of(self, name: str) -> GgufReader:
        try:
            return self._part_of[name]
        except KeyError:
            raise TensorNotFoundError(name, path=self.path, known=len(self._part_of)) from None

    # -- what the model says --------------------------------------------------------------------

    def names(self) -> list[str]:
        """Tensor names part by part, each part's in its tensor-info order (llama.cpp's)."""
        return list(self._part_of)

    def names_in_file_order(self) -> list[str]:
        """Tensor names part by part, each part's in the order its bytes lie."""
        return [name for reader in self.part_readers for name in reader.names_in_file_order()]

    def tensor_infos(self) -> list[tuple[str, DType, tuple[int, ...], int | None]]:
        """Name, dtype, shape and param id (None) of every tensor, in `names_in_file_order`."""
        return [info for reader in self.part_readers for info in reader.tensor_infos()]

    def descriptor(self, name: str) -> GgufTensorInfo:
        """Tensor `name`'s info from its part's header; `TensorNotFoundError` if none has it."""
        return self._reader_of(name).descriptor(name)

    def ggml_type(self, name: str) -> GgmlType:
        """The ggml type tensor `name` is stored in."""
        return self.descriptor(name).ggml

    def metadata(self) -> dict[str, object]:
        """The model's metadata pairs as Python values (`GgufReader.metadata`): part 1's,
        without the ``split.*`` pairs, which describe a part and not the model (a copy into
        one file must not say it is part 1 of 3; ``gguf-split --merge`` drops them too)."""
        values = self.part_readers[0].metadata()
        return {key: value for key, value in values.items() if key not in _SPLIT_KEYS}

    def metadata_typed(self) -> dict[str, GgufValue]:
        """The model's metadata pairs with their GGUF types (part 1's, no ``split.*``)."""
        first = self.part_readers[0]
        return {key: first.metadata_value(key) for key in self.metadata_keys()}

    def metadata_keys(self) -> list[str]:
        """The model's metadata keys, in part 1's order (no ``split.*``)."""
        return [key for key in self.part_readers[0].metadata_keys() if key not in _SPLIT_KEYS]

    def metadata_type(self, key: str) -> str:
        """A key's GGUF type name, without decoding it; `KeyError` when the model has none."""
        return self.part_readers[0].metadata_type(_model_key(key))

    def metadata_length(self, key: str) -> int | None:
        """An array's element count (None for a scalar); `KeyError` when the model has none."""
        return self.part_readers[0].metadata_length(_model_key(key))

    def metadata_value(self, key: str) -> GgufValue:
        """One metadata pair, decoded; `KeyError` when the model has none (``split.*`` are
        each part's: `part_readers`)."""
        return self.part_readers[0].metadata_value(_model_key(key))

    # -- tensors --------------------------------------------------------------------------------

    def get(self, name: str, dtype: DType | str | None = None) -> np.ndarray[Any, Any]:
        """Tensor `name` from its part, as `GgufReader.get` reads it."""
        return self._reader_of(name).get(name, dtype)

    def get_raw(self, name: str) -> np.ndarray[Any, Any]:
        """Tensor `name`'s bytes as they lie in its part (`GgufReader.get_raw`)."""
        return self._reader_of(name).get_raw(name)

    def get_bytes(self, name: str) -> memoryview:
        """Tensor `name`'s raw bytes, from its part."""
        return self._reader_of(name).get_bytes(name)

    def get_slice(self, name: str) -> TensorSlice | BlockSlice:
        """Tensor `name` to index lazily, from its part (`GgufReader.get_slice`)."""
        return self._reader_of(name).get_slice(name)

    def plan_reads(self, names: Iterable[str]) -> None:
        """Tell each part the tensors of `names` it holds (remote parts fetch them batched)."""
        for reader, chosen in self._by_part(names).items():
            reader.plan_reads(chosen)

    def check_digests(self, enabled: bool = True) -> None:
        """Turn checking each part's tensor digests as tensors are read on or off."""
        for reader in self.part_readers:
            reader.check_digests(enabled)

    def verify_digests(self, names: Iterable[str] | None = None) -> list[str]:
        """Check the bytes of `names` (every tensor by default) against the digests their
        parts carry; the names that carry none, sorted (a name no part holds among them).

        Raises:
            DigestMismatchError: the first tensor whose bytes differ.
        """
        wanted = self.names() if names is None else list(names)
        missing = [name for name in wanted if name not in self._part_of]
        for reader, chosen in self._by_part(wanted).items():
            missing += reader.verify_digests(chosen)
        return sorted(missing)

    def _by_part(self, names: Iterable[str]) -> dict[GgufReader, list[str]]:
        grouped: dict[GgufReader, list[str]] = {}
        for name in names:
            reader = self._part_of.get(name)
            if reader is not None:
                grouped.setdefault(reader, []).append(name)
        return grouped

    def close(self) -> None:
        """Close every part; arrays already handed out stay valid."""
        for reader in self.part_readers:
            reader.close()

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._part_of

    def __len__(self) -> int:
        return len(self._part_of)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __enter__(self) -> GgufSplitReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<GgufSplitReader {self.path!r}: {len(self.parts)} parts, {len(self)} tensors>"


# -- opening the parts ---------------------------------------------------------------------------


def _open_split(
    opened: GgufReader, filename: str, count: int, options: dict[str, Any]
) -> GgufSplitReader:
    """Every part of the model `opened` (at `filename`) is a part of, checked; `opened` is
    taken over on success, and left to the caller to close on failure."""
    name = parse_part_name(file_name(filename))
    if name is None:
        raise SetError(
            f"is part of a split model ({SPLIT_COUNT_KEY} is {count:,}), but its name does not "
            f"end in -NNNNN-of-{count:05d}.gguf, which is how the other parts are found; "
            "rename the parts as gguf-split named them",
            path=filename,
        )
    if name.count != count:
        raise SetError(
            f"its name says the model has {name.count:,} parts, its {SPLIT_COUNT_KEY} says "
            f"{count:,}",
            path=filename,
        )
    _check_place(opened, filename, name.number, filename)
    readers: list[GgufReader] = []
    try:
        for number in range(1, count + 1):
            if number == name.number:
                readers.append(opened)
                continue
            path = part_path(filename, name.prefix, number, count)
            reader = _open_part(path, number, count, filename, options)
            readers.append(reader)
            _check_part(reader, number, count, filename)
        split = GgufSplitReader(readers)
        _check_total(split, filename)
        return split
    except BaseException:
        for reader in readers:
            if reader is not opened:
                reader.close()
        raise


def _open_part(
    path: str, number: int, count: int, opened: str, options: dict[str, Any]
) -> GgufReader:
    try:
        return GgufReader.from_file(path, **options)
    except FileMissingError as err:
        if err.reason is not None:  # the name cannot exist: say that, not "missing"
            raise
        raise SplitPartMissingError(path, part=number, count=count, opened=opened) from None


def _check_part(reader: GgufReader, number: int, count: int, opened: str) -> None:
    """Part `number` (not the one opened) is a part of the same `count`-part model."""
    path = str(reader.path)
    found = _split_int(reader, SPLIT_COUNT_KEY)
    if found is None:
        raise SetError(
            f"part {file_name(path)} has no {SPLIT_COUNT_KEY}: it is no part of a split model "
            "(a file of another model under the part's name?)",
            path=opened,
            shard=path,
        )
    if found != count:
        raise SetError(
            f"part {file_name(path)} says the model has {found:,} parts ({SPLIT_COUNT_KEY}), "
            f"{file_name(opened)} says {count:,}: parts of different splits?",
            path=opened,
            shard=path,
        )
    _check_place(reader, path, number, opened)


def _check_place(reader: GgufReader, path: str, number: int, opened: str) -> None:
    """The part at `path` says it is part `number` (``split.no`` is ``number - 1``)."""
    place = _split_int(reader, SPLIT_NO_KEY)
    if place is None or place != number - 1:
        said = f"has no {SPLIT_NO_KEY}" if place is None else f"has {SPLIT_NO_KEY} {place:,}"
        raise SetError(
            f"part {file_name(path)} {said}, but its name makes it part {number:,} "
            f"({SPLIT_NO_KEY} {number - 1:,}, counted from 0)",
            path=opened,
            shard=path,
        )


def _check_total(split: GgufSplitReader, opened: str) -> None:
    """Every part that gives ``split.tensors.count`` gives the tensors all parts hold."""
    total = len(split)
    for reader in split.part_readers:
        said = _split_int(reader, SPLIT_TENSORS_KEY)
        if said is not None and said != total:
            path = str(reader.path)
            raise SetError(
                f"part {file_name(path)} says the model has {said:,} tensors "
                f"({SPLIT_TENSORS_KEY}), but its {len(split.parts):,} parts hold {total:,}",
                path=opened,
                shard=path,
            )


def _part_count(reader: GgufReader) -> int | None:
    """The part count of a split file, or None for a file that is not split."""
    count = _split_int(reader, SPLIT_COUNT_KEY)
    if count is None or count in (0, 1):
        return None
    if not 0 <= count <= _MAX_PARTS:
        raise MetadataError(
            f"{SPLIT_COUNT_KEY} is {count:,}; it counts parts as a uint16 (0 to {_MAX_PARTS:,})",
            path=reader.path,
        )
    return count


def _split_int(reader: GgufReader, key: str) -> int | None:
    """The integer at `key`, or None where the file has no such key."""
    try:
        value = reader.metadata_value(key)
    except KeyError:
        return None
    if value.type not in INTEGER_RANGES or type(value.value) is not int:
        raise MetadataError(f"{key} is a {value.type_name}, not an integer", path=reader.path)
    return value.value
