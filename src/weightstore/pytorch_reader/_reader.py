"""`PytorchReader`: a PyTorch checkpoint's tensors by name, without torch and without running it.

It follows the protocol every weightstore reader shares: `from_file`, `names`, `get` (an array),
`get_slice`, `metadata`, ``in``, ``len``, iteration and ``with``. Opening a file maps it and
decodes its pickle (the only bytes read); names come from walking the decoded object (`_walk`);
a tensor's bytes are read when it is asked for.
"""

from __future__ import annotations

import os
from abc import ABCMeta
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from weightstore.base._gc import collector_paused
from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import RecordMeta, ValueRecord
from weightstore.dtypes import DType, from_name
from weightstore.errors import (
    CodeObjectError,
    DTypeError,
    KeyNotFoundError,
    QuantizedTensorError,
    TensorNotFoundError,
)
from weightstore.io._source import ByteSource, ReadMode
from weightstore.pytorch_reader._archive import open_archive, open_archive_in
from weightstore.pytorch_reader._layout import (
    MAX_CODE_SIZE,
    MAX_CONTAINER_SIZE,
    MAX_DEPTH,
    MAX_EXPANDED_SIZE,
    MAX_INFLATED_SIZE,
    MAX_MEMO_SIZE,
    MAX_NAMES_SIZE,
    MAX_NODES,
    MAX_PICKLE_SIZE,
    MAX_STACK_SIZE,
    MAX_STORAGE_COUNT,
    Limits,
)
from weightstore.pytorch_reader._loaded import Layout
from weightstore.pytorch_reader._policy import Scan, scan_globals
from weightstore.pytorch_reader._qtensor import (
    QuantizedInfo,
    QuantizedTensor,
    dequantize,
    part_of,
)
from weightstore.pytorch_reader._tensors import LazyTensor, TensorSlice, UnreadableTensor
from weightstore.pytorch_reader._walk import Leaf, name_tensors, short_repr, tensor_holders

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # listing a checkpoint needs no NumPy

__all__ = ["PytorchMetadata", "PytorchReader"]


class _MappingRecordMeta(RecordMeta, ABCMeta):
    """A record that is also a `Mapping` (an ABC) needs a metaclass deriving from both."""


class PytorchMetadata(ValueRecord, Mapping[str, object], metaclass=_MappingRecordMeta):
    """What a checkpoint says about itself; also a read-only mapping of field name to value.

    Attributes:
        format: ``"zip"``, ``"legacy"``, ``"tar"``, ``"pickle"`` (a plain pickle file) or
            ``"torchscript"`` (a `torch.jit.save` archive, listed as its ``state_dict()``).
        byte_order: order of the stored tensor bytes, ``"little"`` or ``"big"``.
        pytorch_version: ``None``: `torch.save` records no torch version in any layout. (Burn
            reports the zip ``version`` record here; that is `archive_version`.)
        format_version: zip ``.format_version``; ``"1001"`` for legacy files.
        archive_version: zip ``version`` record, the zip writer's record-format version.
        storage_alignment: zip ``.storage_alignment`` in bytes, when recorded.
        pickle_protocol: protocol of the main pickle.
        tensor_count: tensors the reader lists (under `top_level_key`, if given).
        total_bytes: bytes of those tensors' elements (``sum(numel * itemsize)``).
        sys_info: the legacy and tar ``sys_info`` dict.
    """

    format: Layout
    byte_order: str
    pytorch_version: str | None
    format_version: str | None
    archive_version: str | None
    storage_alignment: int | None
    pickle_protocol: int
    tensor_count: int
    total_bytes: int
    sys_info: dict[str, object] | None

    def __getitem__(self, key: str) -> object:
        """The field `key`; `KeyError` for any other key."""
        if key not in _METADATA_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_METADATA_FIELDS)

    def __len__(self) -> int:
        return len(_METADATA_FIELDS)


_METADATA_FIELDS = PytorchMetadata._FIELDS


class PytorchReader:
    """An open PyTorch checkpoint (`torch.save` output of any era). Usable as a context manager.

    ``PytorchReader(path, ...)`` and ``PytorchReader.from_file(path, ...)`` open the same way.

    Args:
        path: the file, or a URL of a zip checkpoint (``s3://...``, ``https://...``): its
            zip directory, ``data.pkl`` and then each storage are read by range requests
            (docs/remote.md). Legacy (pre-1.6) and tar checkpoints are read in full by this
            reader, so at a URL they are refused: download them first.
        top_level_key: list only the tensors under this key of the top-level dict
            (``"model_state_dict"`` in a training checkpoint); names are then relative to it.
            A dotted path (``"state_dict.model"``) selects a key of a nested dict; a key
            spelled exactly so wins over the path.
        max_pickle_size, max_memo_size, max_stack_size, max_container_size, max_depth,
            max_nodes, max_storage_count, max_inflated_size, max_names_size,
            max_expanded_size, max_code_size: resource limits (see `Limits`); raise one only
            for files you trust.
        mode: ``"mmap"`` (default: tensors are views of the mapped file) or ``"pread"``
            (each `get` reads a fresh copy and the reader keeps none, so a pass over every
            tensor holds one at a time: a conversion of a file larger than memory).
        storage_options: for a URL, what its filesystem is opened with.
        refuse_code: refuse a file whose pickle names globals that would run code under
            ``torch.load`` (`scan`; the stores set it unless objects are allowed). Off, such
            a file reads as inert data, as it always does.
        source: the checkpoint's bytes when it lies inside another file (a ``.nemo`` tar's
            member): read through it, `path` naming it in messages, the zip layout only; the
            caller closes it after the reader.

    Raises:
        UnsupportedFormatError: not a PyTorch checkpoint (torch.package, a compressed file,
            another weight format, ...); the message says what it is or shows its first bytes.
        FormatError: the file breaks its layout; `PickleError`, `TruncatedError`,
            `LimitExceeded` and `ArchiveError` say how.
        KeyNotFoundError: `top_level_key` is not there; the error lists the keys that are.
        CodeObjectError: with `refuse_code`, the pickle names globals that would run code.
        InvalidOptionError: a limit that is not a positive int.

    Attributes:
        path: the file, as opened.
        top_level_key: the key the reader lists tensors under, or ``None`` for the whole file.

    Example:
        >>> with PytorchReader.from_file("model.pt") as reader:  # doctest: +SKIP
        ...     weight = reader.get("fc1.weight")  # a NumPy view of the mapped file
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        top_level_key: str | None = None,
        *,
        max_pickle_size: int = MAX_PICKLE_SIZE,
        max_memo_size: int = MAX_MEMO_SIZE,
        max_stack_size: int = MAX_STACK_SIZE,
        max_container_size: int = MAX_CONTAINER_SIZE,
        max_depth: int = MAX_DEPTH,
        max_nodes: int = MAX_NODES,
        max_storage_count: int = MAX_STORAGE_COUNT,
        max_inflated_size: int = MAX_INFLATED_SIZE,
        max_names_size: int = MAX_NAMES_SIZE,
        max_expanded_size: int = MAX_EXPANDED_SIZE,
        max_code_size: int = MAX_CODE_SIZE,
        mode: ReadMode = "mmap",
        storage_options: Mapping[str, Any] | None = None,
        refuse_code: bool = False,
        source: ByteSource | None = None,
    ) -> None:
        self._limits = Limits(
            max_pickle_size=max_pickle_size,
            max_memo_size=max_memo_size,
            max_stack_size=max_stack_size,
            max_container_size=max_container_size,
            max_depth=max_depth,
            max_nodes=max_nodes,
            max_storage_count=max_storage_count,
            max_inflated_size=max_inflated_size,
            max_names_size=max_names_size,
            max_expanded_size=max_expanded_size,
            max_code_size=max_code_size,
        )
        self.path = os.fspath(path)
        self.top_level_key = top_level_key
        self._scan: Scan | None = None
        with collector_paused():
            if source is None:
                self._loaded = open_archive(self.path, self._limits, mode, storage_options)
            else:
                self._loaded = open_archive_in(source, self._limits)
            try:
                self._object = self._select(top_level_key)
                if refuse_code:
                    self._refuse_code()
            except BaseException:
                self._loaded.close()
                raise
        self._named: dict[str, Leaf] | None = None
        # Tensors already named and validated: a load asks for each one's descriptor, then its
        # values, and a LazyTensor is immutable, so the checks run once per name.
        self._checked: dict[str, LazyTensor] = {}

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        top_level_key: str | None = None,
        mode: ReadMode = "mmap",
        storage_options: Mapping[str, Any] | None = None,
        refuse_code: bool = False,
        **limits: int,
    ) -> PytorchReader:
        """Open `path`: the same as the constructor, in the form every weightstore reader has.

        Args:
            path: the file.
            top_level_key, mode, storage_options, refuse_code: as for the class.
            limits: ``max_pickle_size`` and the other resource limits of the class.
        """
        limit_options: dict[str, Any] = dict(limits)  # ints, though `source` takes a source
        return cls(
            path, top_level_key, mode=mode, storage_options=storage_options,
            refuse_code=refuse_code, **limit_options,
        )  # fmt: skip

    # -- tensors ---------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Dotted tensor names in file order (the pickle's order); reads no tensor data."""
        return list(self._names())

    def names_in_file_order(self) -> list[str]:
        """The same as `names`: a checkpoint's names are already in the pickle's order."""
        return self.names()

    def keys(self) -> list[str]:
        """Alias of `names`, kept from before the readers shared one protocol."""
        return self.names()

    def descriptor(self, name: str) -> LazyTensor:
        """What the reader protocol asks of a tensor before reading it (dtype, shape,
        `param_id`): for a checkpoint, the checked `LazyTensor` that `tensor` returns."""
        return self.tensor(name)

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """The values of tensor `name` as `torch.load` gives them, as a NumPy array: a view of
        the mapped file for a contiguous, aligned, little-endian tensor, else a copy.

        Raises:
            The errors of `tensor`, and those of `LazyTensor.to_numpy` (a meta tensor has no
            values; a stored tensor's bytes may disagree with the pickle).
        """
        return self.tensor(name).to_numpy()

    def get_slice(self, name: str) -> TensorSlice:
        """Tensor `name` to index like an array (``[a:b, ::2]``); indexing reads the whole
        tensor first (see `TensorSlice`), then selects.

        Raises:
            The errors of `tensor`.
        """
        return TensorSlice(self.tensor(name))

    def tensor(self, name: str) -> LazyTensor:
        """The tensor `name`, unread but proven readable (dtype known, storage present, view
        inside it): its dtype, shape and size, and `to_numpy` for its values.

        Raises:
            TensorNotFoundError: no tensor has that name.
            DTypeError, UnsupportedObjectError: a tensor NumPy cannot hold (complex32,
                sparse, ...); `QuantizedTensorError` (an `UnsupportedObjectError`) for a
                torch quantized tensor, naming its scheme: `get_dequantized` reads it.
            MissingStorageError, DescriptorError: its storage is missing or too small.
        """
        tensor = self._checked.get(name)
        if tensor is not None:
            return tensor
        leaf = self._leaf(name)
        if isinstance(leaf, UnreadableTensor):
            raise leaf.error(self.path, name)
        tensor = leaf.with_name(name)  # so that its errors name it
        tensor.validate()
        self._checked[name] = tensor
        return tensor

    # -- quantized tensors ------------------------------------------------------------------

    def is_quantized(self, name: str) -> bool:
        """Whether tensor `name` is a torch quantized tensor (which `get` refuses)."""
        return isinstance(self._leaf(name), QuantizedTensor)

    def quantized_info(self, name: str) -> QuantizedInfo:
        """The scheme, logical shape and checked parameters of quantized tensor `name`
        (``scale``/``zero_point``, or ``scales``/``zero_points``/``axis``).

        Raises:
            TensorNotFoundError: no tensor has that name.
            QuantizedTensorError: the tensor is not quantized (its `scheme` is ``"none"``).
            DescriptorError, DTypeError: parameters or storage torch would refuse or could
                not dequantize with (a non-finite scale, a zero point outside the codes'
                range, an axis out of range, scales of the wrong length, a float storage).
        """
        return self._quantized(name).info(self.path, name)

    def quantized_codes(self, name: str) -> np.ndarray[Any, Any]:
        """The integer codes of quantized tensor `name` (int8 for qint8, uint8 for quint8,
        int32 for qint32) in its logical shape, strides honoured: ``int_repr()``.

        Raises:
            The errors of `quantized_info`, and those of `LazyTensor.to_numpy`.
        """
        return self._quantized(name).codes_array(self.path, name)

    def get_dequantized(self, name: str, dtype: DType | str = "F32") -> np.ndarray[Any, Any]:
        """The values of quantized tensor `name`, ``(codes - zero_point) * scale``, computed
        as torch's CPU ``.dequantize()`` computes them (float32, bit for bit), in its logical
        shape; ``F16``, ``BF16`` or ``F64`` are cast from that float32 result.

        Raises:
            DTypeError: `dtype` is not F32, F16, BF16 or F64.
            The errors of `quantized_codes`.
        """
        output = self._dequantized_dtype(name, dtype)
        quantized = self._quantized(name)
        info = quantized.info(self.path, name)
        codes = quantized.codes_array(self.path, name, info)
        return dequantize(info, codes, output)

    def get_dequantized_part(
        self, name: str, index: tuple[slice, ...], dtype: DType | str = "F32"
    ) -> np.ndarray[Any, Any]:
        """``get_dequantized(name, dtype)[index]`` bit for bit, converting only the codes
        `index` selects (with their channels' scales and zero points), so that a rank holding
        a slice allocates about its share. In ``"mmap"`` mode (the default) only the pages
        under the slice are read; in ``"pread"`` mode the storage is read whole, as `get_slice`
        reads any tensor.

        Raises:
            SliceError: `index` is not a tuple of at most one slice per dim.
            The errors of `get_dequantized`.
        """
        output = self._dequantized_dtype(name, dtype)
        quantized = self._quantized(name)
        info = quantized.info(self.path, name)
        part_info, key = part_of(info, index, path=self.path, tensor=name)
        codes = quantized.codes_array(self.path, name, info)
        return dequantize(part_info, np.ascontiguousarray(codes[key]), output)

    def _dequantized_dtype(self, name: str, dtype: DType | str) -> np.dtype[Any]:
        """The NumPy dtype `dtype` names, or the `DTypeError` of `get_dequantized`."""
        try:
            output = from_name(dtype) if isinstance(dtype, str) else dtype
        except DTypeError as err:
            raise DTypeError(err.detail, path=self.path, tensor=name) from None
        if output.name not in ("F32", "F16", "BF16", "F64") or output.numpy is None:
            raise DTypeError(
                f"a quantized tensor dequantizes to F32, F16, BF16 or F64, not {output.name}",
                path=self.path,
                tensor=name,
            )
        return output.numpy

    def _quantized(self, name: str) -> QuantizedTensor:
        """Tensor `name` as a quantized tensor; `QuantizedTensorError` when it is another
        kind (its scheme ``"none"``), `TensorNotFoundError` when there is none."""
        leaf = self._leaf(name)
        if isinstance(leaf, QuantizedTensor):
            return leaf
        if isinstance(leaf, UnreadableTensor):
            raise leaf.error(self.path, name)
        torch_dtype = leaf.torch_dtype
        raise QuantizedTensorError("none", torch_dtype, path=self.path, tensor=name)

    def _leaf(self, name: str) -> Leaf:
        leaf = self._names().get(name)
        if leaf is None:
            raise TensorNotFoundError(name, path=self.path, known=len(self._names()))
        return leaf

    def release(self, name: str) -> None:
        """Done with tensor `name` for now: its storage's mapped pages leave this process's
        resident memory (the page cache keeps them), so a pass that reads every tensor once
        holds about one at a time. Its arrays stay valid and read the file again when
        touched, but writes made to them are lost. A no-op in ``"pread"`` mode, for compressed
        storages, legacy and tar files, and for a name that holds no stored tensor."""
        leaf = self._names().get(name)
        storage = leaf.storage if isinstance(leaf, LazyTensor) else None
        if storage is not None and storage.source is not None:
            storage.source.release(storage.key)

    def tensors(self) -> dict[str, LazyTensor]:
        """Every tensor by name, each checked as `tensor` checks it."""
        return {name: self.tensor(name) for name in self._names()}

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _names(self) -> dict[str, Leaf]:
        if self._named is None:
            self._named = name_tensors(self._object, self._limits, self.path)
        return self._named

    # -- everything else -------------------------------------------------------------------------

    def metadata(self) -> PytorchMetadata:
        """The layout's facts and the tensor totals; reads no tensor data."""
        info = self._loaded.info
        leaves = self._names().values()
        total = sum(leaf.nbytes for leaf in leaves if isinstance(leaf, LazyTensor))
        return PytorchMetadata(
            info.layout,
            info.byte_order,
            None,
            info.format_version,
            info.archive_version,
            info.storage_alignment,
            info.pickle_protocol,
            len(self._names()),
            total,
            info.sys_info,
        )

    def load_object(self, key: str | None = None) -> object:
        """The decoded Python value: plain dicts, lists, numbers and strings, `LazyTensor`s,
        and `InertObject`s recording whatever classes the file named.

        Args:
            key: a key of the file's top-level dict (``"config"``), looked up in the whole
                file even when the reader was opened with a `top_level_key`; ``None`` for
                the object the reader lists tensors of.

        Raises:
            KeyNotFoundError: `key` is not there; the error lists the keys that are.
        """
        if key is None:
            return self._object
        return _entry(self._loaded.root, key, self.path, "key")

    def others(self, limit: int = 60) -> dict[str, str]:
        """Top-level entries holding no tensors (epochs, configs, ...), and those of the dicts
        one level down that hold tensors (a training checkpoint's ``optimizer.param_groups``),
        by dotted name (which `load_object` takes), as descriptions of at most `limit`
        characters, each built at bounded cost whatever the value.

        Raises:
            LimitExceeded: finding which entries hold tensors visits more than ``max_nodes``
                values, all entries together, or nests deeper than ``max_depth``.
        """
        root = self._loaded.root
        if not isinstance(root, dict):
            return {}
        found: dict[str, str] = {}
        holders = tensor_holders(root.values(), self._limits, self.path)
        for (key, value), holds in zip(root.items(), holders, strict=True):
            if not holds:
                found[_key_text(key)] = short_repr(value, limit)
            elif isinstance(value, dict):
                inner = tensor_holders(value.values(), self._limits, self.path)
                for (child, item), child_holds in zip(value.items(), inner, strict=True):
                    if not child_holds:
                        found[f"{_key_text(key)}.{_key_text(child)}"] = short_repr(item, limit)
        return found

    def scan(self) -> Scan:
        """The globals outside torch, NumPy and collections that the whole file's decoded
        value keeps, judged by the policy of `weightstore.pytorch_reader._policy`: those that
        would run code under ``torch.load``, and a user's inert classes. Computed once."""
        if self._scan is None:
            self._scan = scan_globals(self._loaded.root)
        return self._scan

    def _refuse_code(self) -> None:
        scan = self.scan()
        if scan.flagged:
            names = tuple(found.qualname for found in scan.suspicious)
            where = scan.suspicious[0].where if scan.suspicious else ""
            raise CodeObjectError(names, where, complete=scan.complete, path=self.path)

    def _select(self, top_level_key: str | None) -> object:
        if top_level_key is None:
            return self._loaded.root
        return _entry(self._loaded.root, top_level_key, self.path, "top-level key")

    def close(self) -> None:
        """Release the file: it is unmapped now, or when the last array viewing it goes.
        Arrays already handed out stay valid; reading a tensor afterwards raises `ValueError`."""
        self._loaded.close()

    def __enter__(self) -> PytorchReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PytorchReader({self.path!r}, format={self._loaded.info.layout!r})"


def _key_text(key: object) -> str:
    return key if isinstance(key, str) else short_repr(key)


_MISSING = object()


def _entry(root: object, key: str, path: str, what: str) -> object:
    """``root[key]`` of a top-level dict, matching non-string keys by their printed form; a
    dotted `key` (``"state_dict.model"``) that no key spells exactly walks nested dicts, the
    longest key that matches first (a key may itself hold a dot)."""
    found = _lookup(root, key)
    if found is not _MISSING:
        return found
    available = [_key_text(k) for k in root] if isinstance(root, dict) else []
    raise KeyNotFoundError(key, available, path=path, what=what)


def _lookup(value: object, key: str) -> object:
    """`value`'s entry `key` (exact, printed, then dotted), or `_MISSING`. Each step of a
    dotted path consumes one segment at least, so the walk is bounded by the key's dots."""
    if not isinstance(value, dict):
        return _MISSING
    found = _lookup_exact(value, key)
    if found is not _MISSING:
        return found
    cut = key.rfind(".")
    while cut > 0:
        head = _lookup_exact(value, key[:cut])
        if head is not _MISSING:
            found = _lookup(head, key[cut + 1 :])
            if found is not _MISSING:
                return found
        cut = key.rfind(".", 0, cut)
    return _MISSING


def _lookup_exact(value: dict[Any, Any], key: str) -> object:
    """`value`'s entry spelled `key` (as a string, or printed), or `_MISSING`."""
    if key in value:
        return value[key]
    for candidate, item in value.items():
        if _key_text(candidate) == key:
            return item
    return _MISSING
