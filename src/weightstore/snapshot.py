"""Lazy tensor snapshots: what every save and load pipeline passes from stage to stage.

A snapshot knows where a tensor lives (its path segments and the module types that contain it),
what it is (dtype, shape, optional parameter id), and how to produce its data. Nothing is read
until `to_numpy` is called, so filters, remappers and adapters cost nothing per tensor, and a
store can hand out thousands of snapshots for the price of its header.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from weightstore.base._record import ValueRecord, field
from weightstore.container._format import TensorReader
from weightstore.dtypes import DType, from_numpy
from weightstore.errors import SnapshotLoadError, WeightstoreError
from weightstore.quantized._group import QuantizedGroup

__all__ = [
    "DecodedLoad",
    "GroupPart",
    "ReaderLoad",
    "StoredBlocks",
    "TensorSnapshot",
    "load_part_reader",
    "part_reader",
    "reader_snapshots",
    "stored_blocks",
]

ArrayLoader = Callable[[], "np.ndarray[Any, Any]"]


class ReaderLoad(functools.partial):  # type: ignore[type-arg]
    """A snapshot's load that is ``reader.get(name)`` (every store snapshot's, from
    `reader_snapshots`), which can also read a part of the tensor alone (`part_reader`).
    A `functools.partial`, so a load costs what a partial's call costs."""

    __slots__ = ()

    def read_part(self, index: Any) -> np.ndarray[Any, Any]:
        """``reader.get_slice(name)[index]``: only the part's bytes where the format allows."""
        reader: TensorReader = getattr(self.func, "__self__")  # noqa: B009 (a bound method)
        return np.asarray(reader.get_slice(self.args[0])[index])


class DecodedLoad(functools.partial):  # type: ignore[type-arg]
    """A snapshot's load that is ``view.dequantized(name, dtype)`` (a quantized group read
    with ``with_dequantize``), which can also decode a part alone (`part_reader`): only the
    codes and scales of the blocks enclosing the part are read."""

    __slots__ = ()

    def read_part(self, index: Any) -> np.ndarray[Any, Any]:
        """``view.dequantized_part(name, index, dtype)``."""
        view = getattr(self.func, "__self__")  # noqa: B009 (a bound method)
        name, dtype = self.args
        part: np.ndarray[Any, Any] = view.dequantized_part(name, index, dtype)
        return part


def part_reader(snapshot: TensorSnapshot) -> Callable[[Any], np.ndarray[Any, Any]] | None:
    """How to read a part (``[a:b, :]``) of `snapshot`'s tensor without reading the rest: the
    reader's slice when the snapshot comes straight from a container reader, the enclosing
    blocks' decoding for a quantized group read dequantized; None when its load is anything
    else (an adapter's cast or transpose, an array in memory), which only gives the whole
    tensor."""
    return load_part_reader(snapshot.load)


def load_part_reader(load: Any) -> Callable[[Any], np.ndarray[Any, Any]] | None:
    """`part_reader` of a snapshot whose load is `load`."""
    return load.read_part if type(load) is ReaderLoad or type(load) is DecodedLoad else None


class StoredBlocks(ValueRecord):
    """How a quantized source stores a tensor whose snapshot gives its values: the encoding
    (a ggml type name), its bytes as stored, and its values in a float dtype of the caller's
    choice. It belongs to one `load`: a snapshot whose load was replaced (an adapter's cast,
    a transpose) no longer has it (`stored_blocks`), since its values are no longer these.

    Attributes:
        encoding: the ggml type name (``"Q4_K"``), ``"QFLOAT"`` for a Burn QFloat tensor, or a
            quantized group's layout (``"fp8-block"``) for a group read dequantized.
        read_blocks: the stored bytes (``uint8``) as a GGUF writer copies them (a burnpack
            writer, for QFloat), or None when GGUF has no type for the encoding.
        read_as: the values in a float `DType` (``BF16``), decoded straight to it.
        load: the snapshot load these describe.
        quant_scheme: a QFloat tensor's scheme as its descriptor holds it, for the writer
            to keep verbatim; None for the rest.
        nbytes: a QFloat tensor's byte length (its scheme's, not its shape's); -1 otherwise.
    """

    encoding: str
    read_blocks: Callable[[], Any] | None = field(compare=False)
    read_as: Callable[[DType], Any] = field(compare=False)
    load: Any = field(compare=False)
    quant_scheme: Mapping[str, Any] | None = field(default=None, compare=False)
    nbytes: int = -1

    def rebound(self, load: Any) -> StoredBlocks:
        """The same blocks for a load that reads the same values (a progress counter)."""
        return StoredBlocks(
            self.encoding, self.read_blocks, self.read_as, load, self.quant_scheme, self.nbytes
        )


class GroupPart(ValueRecord):
    """Which quantized group a snapshot's stored tensor belongs to, and as what: the codes or a
    companion (``"scale"``). Filters, remaps and saves keep a group whole by it; a load that
    would put codes into a float tensor names the layout and the option that decodes it.

    Attributes:
        group: the group, under the names its file gives (every part's tag holds the same
            object, so parts of one group are told apart from another's by identity).
        role: ``"codes"``, or the companion's role in ``group.companions``.
        config: the source's ``quantization_config`` the group was recognised by, or None;
            a save writes it as a ``quantization_config`` metadata pair, so that a copy away
            from the source's ``config.json`` is recognised by the same rule.
    """

    group: QuantizedGroup
    role: str
    config: Mapping[str, object] | None = field(default=None, repr=False, compare=False)


def stored_blocks(snapshot: TensorSnapshot) -> StoredBlocks | None:
    """The quantized blocks `snapshot`'s values come from, or None (a plain tensor, or a load
    some step replaced)."""
    stored = snapshot.stored
    return stored if stored is not None and stored.load is snapshot.load else None


class TensorSnapshot(ValueRecord):
    """One tensor, described now and read later.

    Attributes:
        path: path segments from the model root (``("fc1", "weight")``).
        dtype: element type of the data `load` produces.
        shape: dimensions of that data.
        load: returns the data as a NumPy array; called at most once per `to_numpy` call.
        container: module type names from the root to the owning module (``("Net", "Linear")``);
            adapters key on the last one.
        param_id: the parameter's u64 identity (burnpack ``param_id``), when the source has one.
        stored: the quantized blocks behind the values, for a source that stores them so
            (GGUF, a group read dequantized); see `stored_blocks`.
        group: the quantized group this stored tensor is part of, for a source read without
            dequantizing (`GroupPart`).
    """

    path: tuple[str, ...]
    dtype: DType
    shape: tuple[int, ...]
    load: ArrayLoader = field(repr=False, compare=False)
    container: tuple[str, ...] = ()
    param_id: int | None = None
    stored: StoredBlocks | None = field(default=None, repr=False, compare=False)
    group: GroupPart | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_array(
        cls,
        name: str,
        array: np.ndarray[Any, Any],
        container: tuple[str, ...] = (),
        param_id: int | None = None,
    ) -> TensorSnapshot:
        """A snapshot holding an array already in memory (no copy)."""
        return cls(
            tuple(name.split(".")), from_numpy(array.dtype), tuple(array.shape),
            lambda: array, container, param_id,
        )  # fmt: skip

    @property
    def full_path(self) -> str:
        """Path segments joined with dots, as state_dict and Burn name tensors."""
        return ".".join(self.path)

    @property
    def container_path(self) -> str:
        """Container types joined with dots (``"Net.Linear"``), as path filters receive them;
        ``""`` when the source knows no types."""
        return ".".join(self.container)

    @property
    def module_type(self) -> str | None:
        """The type of the module that directly owns the tensor, if known."""
        return self.container[-1] if self.container else None

    @property
    def numel(self) -> int:
        """Number of elements the shape declares (1 for a scalar)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes the data takes in `dtype`, known without reading it (sub-byte dtypes pack)."""
        return self.dtype.nbytes(self.shape)

    def with_name(self, name: str) -> TensorSnapshot:
        """The same tensor under another dotted name; itself when that is its name already
        (a store without remapping renames every tensor to its own name)."""
        # Not `replace`: renaming runs once per tensor on every remapped load.
        path = tuple(name.split("."))
        if path == self.path:
            return self
        return type(self)(
            path, self.dtype, self.shape, self.load, self.container, self.param_id,
            self.stored, self.group,
        )  # fmt: skip

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """Produce the data, checked against the declared shape.

        Raises:
            SnapshotLoadError: the source failed, or produced another shape.
            WeightstoreError: a format error from the source, passed through unchanged.
        """
        try:
            array = self.load()
        except WeightstoreError:
            raise
        except Exception as err:
            raise SnapshotLoadError(f"loading data failed: {err}", tensor=self.full_path) from err
        if tuple(array.shape) != self.shape:
            raise SnapshotLoadError(
                f"source produced shape {list(array.shape)}, declared {list(self.shape)}",
                tensor=self.full_path,
            )
        return array


def reader_snapshots(
    reader: TensorReader, skip: frozenset[str] = frozenset()
) -> list[TensorSnapshot]:
    """Lazy snapshots of every tensor a container reader holds, in file order (reading them in
    this order streams the file), but those in `skip` (torch quantized tensors, which have
    no plain descriptor). Nothing is read until a snapshot's data is asked for."""
    get = reader.get
    # Container readers and sets list their tensors from spans: no descriptor object each.
    tensor_infos = getattr(reader, "tensor_infos", None)
    if tensor_infos is not None:
        infos = tensor_infos()
    else:
        describe = reader.descriptor
        infos = [
            (name, info.dtype, tuple(info.shape), info.param_id)
            for name in reader.names_in_file_order()
            if name not in skip
            for info in (describe(name),)
        ]
    partial, split = ReaderLoad, str.split
    snapshots = [
        TensorSnapshot(tuple(split(name, ".")), dtype, shape, partial(get, name), (), param_id)
        for name, dtype, shape, param_id in infos
    ]
    if any(snapshot.dtype.kind == "q" for snapshot in snapshots):  # Burn's QFloat
        snapshots = [_with_qfloat_bytes(reader, s) if s.dtype.kind == "q" else s for s in snapshots]
    encoding_of = getattr(reader, "stored_encoding", None)  # GGUF's quantized tensors
    if encoding_of is None:
        return snapshots
    return [
        _with_blocks(reader, snapshot, encoding_of(snapshot.full_path)) for snapshot in snapshots
    ]


def _with_qfloat_bytes(reader: Any, snapshot: TensorSnapshot) -> TensorSnapshot:
    """A QFloat snapshot carrying its stored bytes and scheme: `get` refuses it (no plain
    dtype holds it), but a copy into burnpack keeps it byte for byte."""
    name = snapshot.full_path
    descriptor = reader.descriptor(name)
    scheme = getattr(descriptor, "quant_scheme", None)
    if scheme is None or not hasattr(reader, "get_bytes"):
        return snapshot
    stored = StoredBlocks(
        "QFLOAT", functools.partial(reader.get_bytes, name),
        functools.partial(reader.get_dequantized, name), snapshot.load, scheme,
        descriptor.nbytes,
    )  # fmt: skip
    return snapshot.replace(stored=stored)


def _with_blocks(reader: Any, snapshot: TensorSnapshot, encoding: str | None) -> TensorSnapshot:
    if encoding is None:
        return snapshot
    name = snapshot.full_path
    stored = StoredBlocks(
        encoding,
        functools.partial(reader.get_raw, name),
        functools.partial(reader.get, name),  # get(name, dtype): decoded to that dtype
        snapshot.load,
    )
    return snapshot.replace(stored=stored)
