"""Reading an Orbax checkpoint without JAX, Flax or Orbax: its JSON metadata with the standard
library (`_orbax_metadata`), each array through a tensorstore spec of its own.

`open_orbax` reads ``_METADATA`` (and ``_CHECKPOINT_METADATA``) and opens no array. An array
is opened on first use: a zarr (or zarr3) driver over the OCDBT database of the directory, or
over the array's own folder, exactly as Orbax restores it (missing chunks refused, never read
as zeros); its dtype and shape come from its zarr metadata, checked against ``_METADATA``.
`get` reads one array, `get_slice` only the region an index selects.

tensorstore aborts the process when an allocation fails (``std::bad_alloc``) rather than
raising, so every read is refused first (`LimitExceeded`) when it, or one of the chunks it
must decode, is larger than `max_read_bytes`: by default this machine's memory (or the
process's address-space limit, when lower). No registered container format reads Orbax, so a
reader's `format` is None.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import sys
from collections.abc import Collection
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import ValueRecord
from weightstore.container._reader import validate_shape
from weightstore.container._shell import ReaderShell
from weightstore.dtypes import DType, from_numpy
from weightstore.errors import (
    DTypeError,
    LimitExceeded,
    SetError,
    SliceError,
    TensorNotFoundError,
    UnsupportedFormatError,
)
from weightstore.training._orbax_metadata import (
    MAX_ORBAX_METADATA_SIZE,
    STRINGS_NAME,
    OrbaxIndex,
    OrbaxLeaf,
    is_orbax_checkpoint,
    read_json_file,
    read_orbax_index,
)

if TYPE_CHECKING:
    import numpy as np
    import tensorstore as ts
else:
    np = import_on_first_use("numpy", globals(), "np")

__all__ = ["OrbaxReader", "OrbaxSlice", "TensorInfo", "is_orbax_checkpoint", "open_orbax"]

OCDBT_CACHE_BYTES: Final = 64 << 20
"""Bytes of OCDBT b-tree nodes a reader keeps, so that opening each array does not read the
database's index again (Orbax keeps 100 MB); array chunks are never cached."""
_SHOWN: Final = 300  # characters of tensorstore's message kept in ours


class TensorInfo(ValueRecord):
    """What `OrbaxReader.descriptor` says of an array: its stored dtype and shape."""

    dtype: DType
    shape: tuple[int, ...]


def open_orbax(
    path: str,
    *,
    max_metadata_size: int = MAX_ORBAX_METADATA_SIZE,
    max_read_bytes: int | None = None,
) -> OrbaxReader:
    """Open the Orbax checkpoint at `path` to read its arrays one at a time.

    Args:
        path: the item directory (what ``StandardCheckpointer().save`` or
            ``PyTreeCheckpointer().save`` was given), its ``_METADATA``, or a
            ``CheckpointManager`` step directory holding a single item (``ckpt/1000``,
            which holds ``default/``). A manager's root, holding steps, is refused.
        max_metadata_size: refuse a JSON file of the checkpoint larger than this.
        max_read_bytes: refuse a read (a whole array, a slice, or a chunk it must decode)
            larger than this; by default this machine's memory.

    Raises:
        UnsupportedFormatError: tensorstore is not installed.
        FileMissingError, SetError, LimitExceeded: the checkpoint's metadata is missing,
            damaged or too large (`read_orbax_index`).

    Example:
        >>> with open_orbax("ckpt/1000") as reader:  # doctest: +SKIP
        ...     kernel = reader.get("params.fc.kernel")
    """
    tensorstore = _tensorstore()
    index = read_orbax_index(path, max_size=max_metadata_size)
    limit = _memory_bytes() if max_read_bytes is None else max_read_bytes
    return OrbaxReader(index, tensorstore, limit, max_metadata_size)


def _tensorstore() -> ModuleType:
    try:
        import tensorstore
    except ImportError:
        raise UnsupportedFormatError(
            "reading an Orbax checkpoint needs the tensorstore package (pip install "
            "tensorstore); JAX, Flax and Orbax are not needed"
        ) from None
    return tensorstore


def _memory_bytes() -> int:
    """The most one allocation could get here: physical memory, or the address-space limit
    when lower; unbounded where the system says neither."""
    bound = 2**63 - 1
    with contextlib.suppress(ValueError, OSError, AttributeError):  # a system without them
        bound = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if sys.platform == "win32":  # no `resource` module, no address-space limit
        return bound
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return bound if soft == resource.RLIM_INFINITY else min(bound, soft)


class OrbaxReader(ReaderShell):
    """An open Orbax checkpoint: the `TensorReader` protocol over its arrays.

    Open one with `open_orbax`. Attributes:
        path: the item directory.
        index: the decoded `OrbaxIndex` (leaves, Orbax's parameter names, storage flags).
        format: None; no registered container format reads Orbax checkpoints.
    """

    format = None

    def __init__(
        self, index: OrbaxIndex, tensorstore: ModuleType, max_read_bytes: int, max_json: int
    ) -> None:
        self.index, self.path = index, index.path
        self._ts = tensorstore
        self._max_read_bytes, self._max_json = max_read_bytes, max_json
        self._context = tensorstore.Context(
            {"cache_pool#ocdbt": {"total_bytes_limit": OCDBT_CACHE_BYTES}}
        )
        self._stores: dict[str, tuple[ts.TensorStore, TensorInfo]] = {}
        self._chunk_bytes: dict[str, int] = {}  # of one read chunk, each opened array

    # -- the reader protocol -------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every array's dotted name, sorted."""
        return sorted(self.index.arrays)

    def names_in_file_order(self) -> list[str]:
        """Array names in ``_METADATA``'s order: the tree's flattening order."""
        return list(self.index.arrays)

    def tensor_infos(self) -> list[tuple[str, DType, tuple[int, ...], int | None]]:
        """Name, dtype, shape and param id (None) of every array, in file order; opens each
        array's zarr metadata."""
        infos: list[tuple[str, DType, tuple[int, ...], int | None]] = []
        for name in self.names_in_file_order():
            info = self.descriptor(name)
            infos.append((name, info.dtype, info.shape, None))
        return infos

    def descriptor(self, name: str) -> TensorInfo:
        """Dtype and shape of array `name`, from its zarr metadata (read once).

        Raises:
            TensorNotFoundError: no such array.
            SetError: its zarr array is missing or damaged, holds a dtype weightstore has no
                equivalent for, or disagrees with ``_METADATA``.
        """
        return self._opened(name, self._leaf(name))[1]

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """Array `name`, whole, read through tensorstore.

        Raises:
            TensorNotFoundError, SetError: as `descriptor`; or a chunk missing or damaged.
            LimitExceeded: the array or one of its chunks is over `max_read_bytes`.
        """
        store, info = self._opened(name, self._leaf(name))
        return self._read(name, store, info.shape)

    def get_slice(self, name: str) -> OrbaxSlice:
        """Array `name` to index like an array; reads only the chunks the selection crosses."""
        store, info = self._opened(name, self._leaf(name))
        return OrbaxSlice(self, name, store, info)

    def metadata(self) -> dict[str, str]:
        """The user's ``custom_metadata`` (`OrbaxIndex.custom_metadata`); how the arrays are
        stored is in `index`, not here, so a conversion carries none of it into another
        layout."""
        return dict(self.index.custom_metadata)

    def values(self) -> dict[str, object]:
        """The tree's other leaves by name: each Python scalar (saved as a 0-d array, read
        back as ``int``, ``float`` or ``bool``, as Orbax restores it), each string (from
        ``_strings.json``), and each empty container or None.

        Raises:
            SetError: a scalar's array is not 0-d or is damaged; ``_strings.json`` is missing,
                not a JSON object, or lacks a string, or holds another kind of value.
        """
        found: dict[str, object] = {}
        for name, leaf in self.index.scalars.items():
            store, info = self._opened(name, leaf)
            if info.shape:
                raise self._fail(f"its scalar is stored as a {list(info.shape)} array", name)
            found[name] = self._read(name, store, ()).item()
        found.update(self._strings())
        found.update({name: copy.copy(value) for name, value in self.index.empties.items()})
        return found

    def close(self) -> None:
        """Forget the opened arrays; arrays already handed out stay valid."""
        self._stores.clear()
        self._chunk_bytes.clear()

    def _tensor_names(self) -> Collection[str]:
        return self.index.arrays

    def __repr__(self) -> str:
        return f"OrbaxReader({self.path!r}, {len(self.index.arrays)} arrays)"

    # -- opening and reading -------------------------------------------------------------------

    def _leaf(self, name: str) -> OrbaxLeaf:
        leaf = self.index.arrays.get(name)
        if leaf is None:
            raise TensorNotFoundError(name, path=self.path, known=len(self.index.arrays))
        return leaf

    def _spec(self, leaf: OrbaxLeaf) -> dict[str, Any]:
        """The spec Orbax reads the leaf's array with: no chunk may be missing."""
        kvstore: dict[str, Any]
        if self.index.use_ocdbt:
            base = {"driver": "file", "path": os.path.abspath(self.path) + os.sep}
            kvstore = {"driver": "ocdbt", "base": base, "path": leaf.param}
            kvstore["cache_pool"] = "cache_pool#ocdbt"
        else:
            kvstore = {"driver": "file", "path": os.path.join(self.path, leaf.param)}
        return {
            "driver": "zarr3" if self.index.use_zarr3 else "zarr",
            "kvstore": kvstore,
            "recheck_cached_data": False,
            "recheck_cached_metadata": False,
            "fill_missing_data_reads": False,
        }

    def _opened(self, name: str, leaf: OrbaxLeaf) -> tuple[ts.TensorStore, TensorInfo]:
        """The leaf's open array and what it holds, opened and checked on first use."""
        opened = self._stores.get(name)
        if opened is None:
            try:
                future = self._ts.open(
                    self._spec(leaf), open=True, read=True, context=self._context
                )
                store = future.result()
            except ValueError as err:  # tensorstore's every failure status
                raise self._fail(
                    f"its zarr array cannot be opened: {_message(err)}", name
                ) from None
            info = self._checked(name, leaf, store)
            chunk = store.chunk_layout.read_chunk.shape or info.shape
            dims = [c or whole for c, whole in zip(chunk, info.shape, strict=True)]
            self._chunk_bytes[name] = _nbytes(info, dims)
            opened = self._stores[name] = store, info
        return opened

    def _checked(self, name: str, leaf: OrbaxLeaf, store: ts.TensorStore) -> TensorInfo:
        """The array's dtype and shape, refused when weightstore cannot hold them or they
        disagree with what ``_METADATA`` says was written."""
        try:
            dtype = from_numpy(store.dtype.numpy_dtype)
        except (DTypeError, TypeError, AttributeError):
            raise self._fail(f"its zarr array holds {store.dtype}, no tensor dtype", name) from None
        shape = tuple(int(dim) for dim in store.shape)
        if any(int(low) != 0 for low in store.domain.inclusive_min):
            raise self._fail("its zarr array does not start at index 0", name)
        validate_shape(shape, dtype, self.path, name)
        written = leaf.write_shape
        if written is not None and (
            len(written) != len(shape) or any(w > s for w, s in zip(written, shape, strict=True))
        ):
            raise self._fail(
                f"its zarr array is {list(shape)}, but _METADATA says {list(written)} was "
                "written to it",
                name,
            )
        return TensorInfo(dtype, shape)

    def _read(
        self, name: str, region: ts.TensorStore, shape: tuple[int, ...]
    ) -> np.ndarray[Any, Any]:
        """`region` (opened array `name`, or a region of it, of `shape`) read, after its size
        and its array's chunk size are checked against `max_read_bytes`."""
        info = self._stores[name][1]
        sizes = (("bytes of one read", _nbytes(info, shape)),
                 ("bytes of one chunk", self._chunk_bytes[name]))  # fmt: skip
        for what, size in sizes:
            if size > self._max_read_bytes:
                raise LimitExceeded(what, size, self._max_read_bytes, path=self.path, tensor=name)
        try:
            array = np.asarray(region.read().result())
        except ValueError as err:
            raise self._fail(f"its data cannot be read: {_message(err)}", name) from None
        if array.shape != shape:
            raise self._fail(f"read {list(array.shape)} where {list(shape)} was asked", name)
        return array

    def _strings(self) -> dict[str, str]:
        if not self.index.strings:
            return {}
        path = os.path.join(self.path, STRINGS_NAME)
        decoded = read_json_file(path, self._max_json)
        if not isinstance(decoded, dict):
            raise SetError("is no JSON object of strings", path=path)
        found = {}
        for name, leaf in self.index.strings.items():
            value = decoded.get(leaf.param)
            if not isinstance(value, str):
                raise SetError("holds no string for this leaf", path=path, tensor=name)
            found[name] = value
        return found

    def _fail(self, detail: str, name: str) -> SetError:
        return SetError(detail, path=self.path, tensor=name)


def _nbytes(info: TensorInfo, dims: Any) -> int:
    """Bytes of `dims` elements of the array's dtype, zero dims skipped as NumPy counts."""
    return (info.dtype.numpy_itemsize or 1) * math.prod(int(d) or 1 for d in dims)


def _message(err: Exception) -> str:
    """tensorstore's message without the spec it appends, bounded."""
    text = str(err).split(" [tensorstore_spec=", 1)[0]
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}..."


class OrbaxSlice:
    """An array of a checkpoint, not yet read: index it to read the selected region
    (``reader.get_slice("embed.embedding")[1000:2000]``); tensorstore reads only the chunks
    the region crosses."""

    def __init__(
        self, reader: OrbaxReader, name: str, store: ts.TensorStore, info: TensorInfo
    ) -> None:
        self._reader, self._name, self._store, self._info = reader, name, store, info

    @property
    def shape(self) -> tuple[int, ...]:
        """The whole array's dimensions."""
        return self._info.shape

    @property
    def dtype(self) -> DType:
        """The stored element type."""
        return self._info.dtype

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, key: object) -> np.ndarray[Any, Any]:
        """The selected part as an array, as NumPy would select it from the whole array.

        Raises:
            SliceError: an index `weightstore.container._slice.normalize_key` refuses.
            SetError, LimitExceeded: as `OrbaxReader.get`, for the region.
        """
        from weightstore.container._slice import _InvalidIndex, normalize_key

        try:
            selection = normalize_key(key, self.shape)
        except _InvalidIndex as err:
            raise SliceError(str(err), path=self._reader.path, tensor=self._name) from None
        kept = tuple(len(s) for s in selection if isinstance(s, range))
        if 0 in kept:  # nothing selected: nothing to read
            assert self._info.dtype.numpy is not None  # `from_numpy` gave it
            return np.empty(kept, self._info.dtype.numpy)
        region = self._store[tuple(_ts_index(s) for s in selection)]
        return self._reader._read(self._name, region, kept)

    def __repr__(self) -> str:
        return f"OrbaxSlice({self._name!r}, {self._info.dtype.name} {list(self.shape)})"


def _ts_index(selected: int | range) -> int | slice:
    """One axis of a normalized selection as tensorstore indexes it: absolute indices (it
    never counts from the end), the stop just past the last selected index."""
    if isinstance(selected, int):
        return selected
    last = selected[-1]
    return slice(selected.start, last + (1 if selected.step > 0 else -1), selected.step)
