"""Reading a DeepSpeed ZeRO checkpoint (stages 1 to 3, any number of ranks) with no torch and
no DeepSpeed: the fp32 weights zero_to_fp32 would rebuild, or the model states' own.

`is_zero_checkpoint` tells such a directory by its file names alone; `open_zero` opens every
rank file with the PyTorch reader (its pickles decoded by the symbolic machine, never run, and
refused when they name globals that would run code under ``torch.load``) and builds the layout
(`_zero_layout`); `ZeroReader` follows the reader protocol over it. A parameter is read from
just the ranges of the flat partitions holding it, so a pass over a 70B checkpoint holds one
parameter at a time, never a rank's whole partition.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.container._shell import ReaderShell
from weightstore.dtypes import DType
from weightstore.errors import InvalidOptionError, SetError, SliceError, TensorNotFoundError
from weightstore.io._source import READ_MODES, ReadMode
from weightstore.training._zero_layout import (
    LATEST_FILE,
    Gathered,
    Stored,
    Weights,
    ZeroLayout,
    holds_zero_files,
    model_file_name,
    optim_file_names,
    read_layout,
    tag_folder,
    zero_settings,
)

if TYPE_CHECKING:
    import numpy as np

    from weightstore.pytorch_reader import PytorchReader
else:
    np = import_on_first_use("numpy", globals(), "np")

__all__ = ["ZeroReader", "ZeroTensorInfo", "ZeroTensorSlice", "is_zero_checkpoint", "open_zero"]

_WEIGHTS = ("fp32", "model-states")


def is_zero_checkpoint(path: str) -> bool:
    """Whether `path` is a ZeRO checkpoint: a tag folder holding model-states and
    optimizer-states files, or a directory with ``latest`` and such a folder. Reads names only
    (asked of every directory a path may be)."""
    try:
        with os.scandir(path) as listing:
            entries = [(entry.name, entry.is_dir()) for entry in listing]
    except OSError:  # not a directory, or unreadable: not one
        return False
    if holds_zero_files(name for name, _ in entries):
        return True
    if not any(name == LATEST_FILE and not is_dir for name, is_dir in entries):
        return False
    for name, is_dir in entries:
        if is_dir:
            try:
                if holds_zero_files(os.listdir(os.path.join(path, name))):
                    return True
            except OSError:
                continue
    return False


def open_zero(path: str, *, weights: Weights = "fp32", mode: ReadMode = "mmap") -> ZeroReader:
    """Open the ZeRO checkpoint at `path` (the directory holding ``latest``, or a tag folder).

    Args:
        path: the checkpoint directory, or its ``global_stepN`` folder.
        weights: ``"fp32"`` (default): the fp32 master weights rebuilt from the optimizer
            states' partitions, with the buffers and frozen parameters zero_to_fp32 adds;
            ``"model-states"``: the model states' ``module``, in the training dtype (stages 1
            and 2 only: stage 3 saves placeholders there).
        mode: ``"mmap"``: a tensor held by one range of one file is a view of it; ``"pread"``:
            every array is a copy and the pages read are let go after each tensor, so a pass
            over every tensor keeps about one resident.

    Raises:
        SetError: the files disagree: ``latest`` naming a missing tag, a rank's file missing,
            partitions whose sizes disagree with the shapes, ... (naming file and tensor).
        CodeObjectError: a file names globals that would run code under ``torch.load``.
        InvalidOptionError: `weights` or `mode` is not one of its values, or
            ``"model-states"`` of a stage-3 checkpoint.
        FormatError: a file's own bytes are damaged (the PyTorch reader says how).
    """
    if weights not in _WEIGHTS:
        raise InvalidOptionError(
            f"weights must be one of {_WEIGHTS}, not {bounded_repr(weights)}", option="weights"
        )
    if mode not in READ_MODES:
        raise InvalidOptionError(
            f"mode must be one of {READ_MODES}, not {bounded_repr(mode)}", option="mode"
        )
    folder, tag = tag_folder(path)
    optim_names = optim_file_names(folder)
    readers: dict[str, PytorchReader] = {}
    try:
        first = _open(folder, optim_names[min(optim_names)], readers, mode)
        stage, world_size = zero_settings(first.reader, first.name, folder)
        wanted = [_optim_name(optim_names, rank, folder) for rank in range(world_size)]
        extra = sorted(set(optim_names.values()) - set(wanted))
        if extra:
            raise SetError(
                f"holds more optimizer-states files than the {world_size} ranks its "
                "files record (a save over an older one)",
                path=folder,
                shard=extra[0],
            )
        models = [model_file_name(rank, stage) for rank in range(world_size if stage == 3 else 1)]
        for name in [*wanted, *models] if weights == "fp32" else [wanted[0], models[0]]:
            _open(folder, name, readers, mode)
        layout = read_layout(folder, tag, weights, readers)
    except BaseException:
        for reader in readers.values():
            reader.close()
        raise
    return ZeroReader(layout, readers, weights, mode)


class _Opened(ValueRecord):
    name: str
    reader: PytorchReader


def _open(
    folder: str, name: str, readers: dict[str, PytorchReader], mode: ReadMode = "mmap"
) -> _Opened:
    """Rank file `name`, opened once (its pickle decoded, refused if it names code), its
    storages read in `mode`."""
    from weightstore.pytorch_reader import PytorchReader

    reader = readers.get(name)
    if reader is None:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise SetError(
                "is missing: the checkpoint's other files say that rank saved one",
                path=folder,
                shard=name,
            )
        reader = PytorchReader.from_file(path, mode=mode, refuse_code=True)
        readers[name] = reader
    return _Opened(name, reader)


def _optim_name(names: dict[int, str], rank: int, folder: str) -> str:
    name = names.get(rank)
    if name is None:
        prefix = "bf16_" if names[min(names)].startswith("bf16_") else ""
        raise SetError(
            f"is missing: the checkpoint has {len(names)} optimizer-states files "
            "but its ranks say more",
            path=folder,
            shard=f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt",
        )
    return name


class ZeroTensorInfo(ValueRecord):
    """What `ZeroReader.descriptor` says of a tensor."""

    dtype: DType
    shape: tuple[int, ...]
    param_id: None = None


class ZeroReader(ReaderShell):
    """An open ZeRO checkpoint: the reader protocol over its whole tensors. Open one with
    `open_zero`.

    Attributes:
        path: the tag folder the files lie in.
        layout: where every tensor lies (`_zero_layout.ZeroLayout`).
        weights: which weights it reads (``"fp32"`` or ``"model-states"``).
        format: the rank files' format (the PyTorch checkpoint).
    """

    def __init__(
        self,
        layout: ZeroLayout,
        readers: dict[str, PytorchReader],
        weights: Weights,
        mode: ReadMode,
    ) -> None:
        from weightstore.pytorch_reader import FORMAT

        self.layout, self.weights, self.mode = layout, weights, mode
        self.path = layout.folder
        self.format = FORMAT
        self._readers = readers

    # -- the reader protocol -------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every tensor's name (the model's, as ``state_dict()`` spells it), sorted."""
        return sorted(self.layout.entries)

    def names_in_file_order(self) -> list[str]:
        """Names in zero_to_fp32's order: buffers, frozen, trainable, then shared aliases."""
        return list(self.layout.entries)

    def tensor_infos(self) -> list[tuple[str, DType, tuple[int, ...], None]]:
        """Name, dtype, shape and param id (None) of every tensor, in `names_in_file_order`."""
        return [(name, e.dtype, e.shape, None) for name, e in self.layout.entries.items()]

    def descriptor(self, name: str) -> ZeroTensorInfo:
        """Dtype and shape of tensor `name`; reads nothing."""
        entry = self._entry(name)
        return ZeroTensorInfo(entry.dtype, entry.shape)

    def get(self, name: str) -> np.ndarray[Any, Any]:
        """Tensor `name`, read from just the ranges of the files holding it.

        Raises:
            TensorNotFoundError: no such tensor.
            FormatError: a file's bytes disagree with its pickle (the PyTorch reader's errors).
        """
        entry = self._entry(name)
        if isinstance(entry, Stored):
            return self._stored(entry, None)
        return self._elements(entry, 0, math.prod(entry.shape)).reshape(entry.shape)

    def get_slice(self, name: str) -> ZeroTensorSlice:
        """Tensor `name` to index like an array; a gathered parameter reads only the elements
        of the rows its first axis selects."""
        return ZeroTensorSlice(self, name, self._entry(name))

    def metadata(self) -> dict[str, str]:
        """The checkpoint's facts: ZeRO stage, data-parallel world size, tag, DeepSpeed
        version and the weights read."""
        layout = self.layout
        found = {
            "zero_stage": str(layout.stage),
            "world_size": str(layout.world_size),
            "tag": layout.tag,
            "weights": self.weights,
        }
        if layout.ds_version is not None:
            found["ds_version"] = layout.ds_version
        return found

    def values(self) -> dict[str, object]:
        """The model states' plain top-level values (``global_steps``, ``global_samples``,
        ``skipped_steps``, ``dp_world_size``, ``ds_version``, ...)."""
        return dict(self.layout.values)

    def release(self, name: str) -> None:
        """Done with tensor `name`: the mapped pages of the storages it was read from leave
        this process's resident memory (`PytorchReader.release`), so a conversion holds about
        one tensor resident, not every page of every flat partition it has read. Arrays
        already handed out stay valid and read the file again when touched."""
        entry = self._entry(name)
        if isinstance(entry, Stored):
            self._readers[entry.file].release(entry.tensor)
            return
        for piece in entry.pieces:
            self._readers[piece.file].release(piece.tensor)

    def close(self) -> None:
        """Close every rank file; arrays already handed out stay valid."""
        readers, self._readers = self._readers, {}
        for reader in readers.values():
            reader.close()

    def _tensor_names(self) -> Collection[str]:
        return self.layout.entries

    def __repr__(self) -> str:
        layout = self.layout
        return (
            f"ZeroReader({self.path!r}, stage {layout.stage}, {layout.world_size} ranks, "
            f"{len(layout.entries)} tensors)"
        )

    # -- reading -------------------------------------------------------------------------------

    def _entry(self, name: str) -> Gathered | Stored:
        entry = self.layout.entries.get(name)
        if entry is None:
            raise TensorNotFoundError(name, path=self.path, known=len(self.layout.entries))
        return entry

    def _stored(self, entry: Stored, key: object) -> np.ndarray[Any, Any]:
        """A stored tensor (indexed by `key` when given), cast to the entry's dtype."""
        reader = self._readers[entry.file]
        array = reader.get(entry.tensor) if key is None else reader.get_slice(entry.tensor)[key]
        assert entry.dtype.numpy is not None  # the reader admits only dtypes NumPy holds
        result: np.ndarray[Any, Any] = array.astype(entry.dtype.numpy, copy=False)
        return result

    def _elements(self, entry: Gathered, start: int, stop: int) -> np.ndarray[Any, Any]:
        """Elements ``[start, stop)`` of a gathered tensor, flat, read piece by piece."""
        parts = []
        position = 0
        for piece in entry.pieces:
            length = piece.stop - piece.start
            low, high = max(start, position), min(stop, position + length)
            if low < high:
                flat = self._readers[piece.file].get_slice(piece.tensor)
                parts.append(flat[piece.start + low - position : piece.start + high - position])
            position += length
        assert entry.dtype.numpy is not None  # the flat partitions' dtypes are NumPy's
        if len(parts) == 1:
            return parts[0]  # in pread mode a copy of its own already
        return np.concatenate(parts) if parts else np.empty(0, entry.dtype.numpy)


class ZeroTensorSlice:
    """A tensor of a ZeRO checkpoint, not yet read: index it like an array
    (``reader.get_slice("embed.weight")[1000:2000]``)."""

    def __init__(self, reader: ZeroReader, name: str, entry: Gathered | Stored) -> None:
        self._reader, self._name, self._entry = reader, name, entry

    @property
    def shape(self) -> tuple[int, ...]:
        """The whole tensor's dimensions."""
        return self._entry.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy dtype of the arrays indexing returns."""
        assert self._entry.dtype.numpy is not None
        return self._entry.dtype.numpy

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, key: object) -> np.ndarray[Any, Any]:
        """The selected part, as NumPy would select it from the whole tensor.

        Raises:
            SliceError: an index `weightstore.container._slice.normalize_key` refuses.
        """
        from weightstore.container._slice import _InvalidIndex, normalize_key, plan_reads

        entry = self._entry
        try:
            selection = normalize_key(key, entry.shape)
        except _InvalidIndex as err:
            raise SliceError(str(err), path=self._reader.path, tensor=self._name) from None
        if isinstance(entry, Stored):
            return np.asarray(self._reader._stored(entry, key))
        if not entry.shape:
            return np.asarray(self._reader.get(self._name)[()])
        plan = plan_reads(selection, entry.shape, 1)  # runs in elements: itemsize 1
        if not plan.runs:
            return np.empty(plan.result_shape, self.dtype)
        parts = [self._reader._elements(entry, start, start + size) for start, size in plan.runs]
        gathered = parts[0] if len(parts) == 1 else np.concatenate(parts)
        result = gathered.reshape(plan.gathered_shape)[plan.within].reshape(plan.result_shape)
        return result if result.flags.c_contiguous else np.ascontiguousarray(result)
