"""Where each tensor of a DeepSpeed ZeRO checkpoint lies, from its files' decoded pickles.

A checkpoint directory holds ``latest`` (the tag of the newest save) and one folder per tag
(``global_step1/``) holding the model states and one optimizer-states file per data-parallel
rank. The fp32 master weights exist only in the optimizer states, as one flat partition per
rank and parameter group; the layout facts below are those DeepSpeed's own
``deepspeed/utils/zero_to_fp32.py`` (0.19) reconstructs by, and the order it builds its state
dict in (buffers, frozen parameters, trainable ones, then shared aliases) is the order kept here.

* Stages 1 and 2 (``single_partition_of_fp32_groups``): a group's ranks' partitions, joined in
  rank order, are the group's parameters flattened one after another (each followed by its
  ``param_alignment_paddings`` entry, when saved), padded at the end so that the group's length
  is a multiple of ``2 * world_size``; the saved partitions drop that end padding.
* Stage 3 (``fp32_flat_groups``): every parameter is cut into ``ceil(numel / world_size)``
  elements per rank (the last rank's share padded), and each rank's groups, joined, hold its
  share of every parameter one after another, at the same offset on every rank.
* Frozen parameters are not in the optimizer: stages 1 and 2 keep them whole in the model
  states (``frozen_param_fragments``; stage 1 saves none), stage 3 partitions them as it does
  the trainable ones, one fragment per rank's model states. Buffers come from the model
  states' ``module``, floating ones as float32; ``shared_params`` names aliases of parameters.

Nothing here reads tensor data: the layout is built from the pickles and the flat tensors'
descriptors, and every claim a file makes is checked against the others' (`SetError`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final, Literal

from weightstore.base._record import Record, ValueRecord
from weightstore.base._render import bounded_int, bounded_repr
from weightstore.dtypes import DType, from_name
from weightstore.errors import InvalidOptionError, SetError

if TYPE_CHECKING:
    from weightstore.pytorch_reader import PytorchReader

__all__ = [
    "LATEST_FILE",
    "MAX_LATEST_SIZE",
    "Gathered",
    "Piece",
    "Stored",
    "Weights",
    "ZeroLayout",
    "holds_zero_files",
    "model_file_name",
    "optim_file_names",
    "read_layout",
    "tag_folder",
    "zero_settings",
]

Weights = Literal["fp32", "model-states"]
"""Which weights a reader gives: the fp32 master weights rebuilt from the optimizer's flat
partitions (zero_to_fp32's), or the training-precision ones the model states hold."""

LATEST_FILE: Final = "latest"
"""The file naming the checkpoint's newest tag folder (``global_step1000``)."""
MAX_LATEST_SIZE: Final = 4096
"""Bytes of ``latest`` read at most: it holds one tag (``global_step1000``)."""

_OPTIM_FILE: Final = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")
_MODEL_FILE: Final = re.compile(r"(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt")
_MAX_NDIM: Final = 64  # more dimensions than any parameter has: a shape claiming more lies
_SHOWN: Final = 60  # characters of a file-supplied name in a message
F32: Final = from_name("F32")  # the master weights', and floating buffers' as zero_to_fp32 has them


class Piece(ValueRecord):
    """Elements ``[start, stop)`` of a flat tensor `tensor` (a reader name) in file `file`."""

    file: str
    tensor: str
    start: int
    stop: int


class Gathered(ValueRecord):
    """A tensor put together from `pieces`, joined in order: exactly its ``prod(shape)``
    elements (a stage-3 parameter's padding is cut off its last rank's piece already)."""

    dtype: DType
    shape: tuple[int, ...]
    pieces: tuple[Piece, ...]


class Stored(ValueRecord):
    """A tensor stored whole as `tensor` in file `file`, read as `dtype` (a floating buffer
    becomes float32, as zero_to_fp32 gives it)."""

    dtype: DType
    shape: tuple[int, ...]
    file: str
    tensor: str


class ZeroLayout(Record):
    """What an opened checkpoint knows before any tensor is read.

    Attributes:
        folder: the tag folder holding the files.
        tag: its name (``global_step1``).
        stage: the ZeRO stage, 1 to 3.
        world_size: the data-parallel ranks that saved it.
        ds_version: the DeepSpeed version that saved it, where the files say.
        entries: every tensor by name, in zero_to_fp32's order.
        values: the model states' plain top-level values (``global_steps``, ...).
    """

    folder: str
    tag: str
    stage: int
    world_size: int
    ds_version: str | None
    entries: dict[str, Gathered | Stored]
    values: dict[str, object]


def tag_folder(path: str) -> tuple[str, str]:
    """The tag folder of the checkpoint at `path` and the tag's name: the folder ``latest``
    names, or `path` itself when it holds the rank files.

    Raises:
        SetError: ``latest`` is too long, names no plain folder name, or a missing folder.
    """
    latest = os.path.join(path, LATEST_FILE)
    if not os.path.isfile(latest):
        return path, os.path.basename(os.path.normpath(path))
    with open(latest, "rb") as file:
        data = file.read(MAX_LATEST_SIZE + 1)
    if len(data) > MAX_LATEST_SIZE:
        raise SetError(f"is over {MAX_LATEST_SIZE:,} bytes, not one tag", path=latest)
    tag = data.decode("utf-8", "replace").strip()
    if not tag or tag in (".", "..") or "/" in tag or "\\" in tag or "\0" in tag:
        raise SetError(f"names {bounded_repr(tag, limit=_SHOWN)}, not a folder name", path=latest)
    folder = os.path.join(path, tag)
    if not os.path.isdir(folder):
        raise SetError(
            f"names tag {bounded_repr(tag, limit=_SHOWN)}, but there is no such folder "
            "beside it (a save that never finished, or a folder deleted)",
            path=latest,
        )
    return folder, tag


def holds_zero_files(names: Iterable[str]) -> bool:
    """Whether a folder listing `names` holds a model-states and an optimizer-states file."""
    model = optim = False
    for name in names:
        model = model or _MODEL_FILE.fullmatch(name) is not None
        optim = optim or _OPTIM_FILE.fullmatch(name) is not None
    return model and optim


def optim_file_names(folder: str) -> dict[int, str]:
    """The optimizer-states files of `folder` by data-parallel rank.

    Raises:
        SetError: none there, a tensor-parallel rank's file (``mp_rank_01``), or two files
            for one rank (``bf16_`` and plain beside each other).
    """
    found: dict[int, str] = {}
    for name in sorted(os.listdir(folder)):
        match = _OPTIM_FILE.fullmatch(name)
        if match is None:
            continue
        if int(match.group(2)) != 0:
            raise SetError(
                "a tensor-parallel ZeRO checkpoint (model-parallel rank "
                f"{int(match.group(2))}) is not supported",
                path=folder,
                shard=name,
            )
        rank = int(match.group(1))
        if rank in found:
            raise SetError(
                f"holds two optimizer-states files of rank {rank}: {found[rank]} and "
                "this one (two saves in one folder)",
                path=folder,
                shard=name,
            )
        found[rank] = name
    if not found:
        raise SetError("holds no *_optim_states.pt file", path=folder)
    return found


def model_file_name(rank: int, stage: int) -> str:
    """The model-states file of `rank` (stage 3 writes one per rank, stages 1 and 2 one)."""
    return (
        f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt"
        if stage == 3
        else ("mp_rank_00_model_states.pt")
    )


def zero_settings(optim: PytorchReader, shard: str, folder: str) -> tuple[int, int]:
    """The ZeRO stage and data-parallel world size an optimizer-states file records.

    Raises:
        SetError: the file holds no ``optimizer_state_dict`` with them, or values out of range.
    """
    state = _optimizer_state(optim, shard, folder)
    stage = _stage(state.get("zero_stage"))
    if stage is None:
        raise SetError(
            f"its zero_stage {bounded_repr(state.get('zero_stage'), limit=_SHOWN)} is "
            "not 1, 2 or 3",
            path=folder,
            shard=shard,
        )
    counts = state.get("partition_count")
    counts = counts if isinstance(counts, (list, tuple)) else [counts]
    if not counts or not all(_is_count(count) for count in counts):
        raise SetError(
            f"its partition_count {bounded_repr(state.get('partition_count'))} is not "
            "a positive int or a list of them",
            path=folder,
            shard=shard,
        )
    return stage, max(counts)  # groups differ only for experts: the largest is the dp size


def read_layout(
    folder: str, tag: str, weights: Weights, readers: Mapping[str, PytorchReader]
) -> ZeroLayout:
    """The checkpoint's layout from its open files (`readers`: file name -> reader, every
    optimizer-states file and the model-states files of `model_file_name`).

    Raises:
        SetError: the files disagree with each other (see the module's checks).
        InvalidOptionError: ``weights="model-states"`` of a stage-3 checkpoint, whose model
            states hold only empty placeholders.
    """
    optim_names = sorted(name for name in readers if _OPTIM_FILE.fullmatch(name))
    stage, world_size = zero_settings(readers[optim_names[0]], optim_names[0], folder)
    model_name = model_file_name(0, stage)
    model = readers[model_name]
    root = model.load_object()
    if not isinstance(root, dict) or "buffer_names" not in root:
        raise SetError(
            "is not a DeepSpeed model-states file (no buffer_names)", path=folder, shard=model_name
        )
    version = root.get("ds_version")
    values: dict[str, object] = {
        key: value
        for key, value in root.items()
        if isinstance(key, str) and isinstance(value, (bool, int, float, str))
    }
    if weights == "model-states":
        if stage == 3:
            raise InvalidOptionError(
                "a ZeRO-3 checkpoint's model states hold only empty "
                "placeholders of its partitioned weights; read weights='fp32'",
                option="weights",
            )
        entries: dict[str, Gathered | Stored] = {
            name: _stored(model, model_name, "module." + name, None) for name in _module(model)
        }
    else:
        builder = _Builder(folder, stage, world_size, readers, optim_names)
        entries = builder.entries(root)
    shown = version if isinstance(version, str) else None
    return ZeroLayout(folder, tag, stage, world_size, shown, entries, values)


class _Builder:
    """Builds the fp32 entries, in zero_to_fp32's order, checking each file against the rest."""

    def __init__(
        self,
        folder: str,
        stage: int,
        world_size: int,
        readers: Mapping[str, PytorchReader],
        optim_names: list[str],
    ) -> None:
        self.folder, self.stage, self.world_size = folder, stage, world_size
        self.readers = readers
        self.optim_names = optim_names
        self.model_names = [model_file_name(rank, stage) for rank in range(world_size)]
        if stage != 3:
            self.model_names = self.model_names[:1]
        self.groups_key = "fp32_flat_groups" if stage == 3 else "single_partition_of_fp32_groups"
        self.flat = [self._flat_groups(name) for name in optim_names]  # per rank: (tensor, numel)
        for shard, groups in zip(optim_names, self.flat, strict=True):
            if len(groups) != len(self.flat[0]):
                raise self._fail("holds another number of parameter groups than rank 0's", shard)

    def entries(self, root: dict[object, object]) -> dict[str, Gathered | Stored]:
        model_name = self.model_names[0]
        model = self.readers[model_name]
        buffer_names = _string_list(root.get("buffer_names"), "buffer_names", self, model_name)
        found: dict[str, Gathered | Stored] = {}
        for name in _module(model):
            if name in buffer_names:
                found[name] = _stored(model, model_name, "module." + name, F32)
        frozen = root.get("frozen_param_shapes")
        if frozen:  # stage 1 saves none; zero_to_fp32 then leaves frozen parameters out
            found.update(self._frozen(_shape_map(frozen, "frozen_param_shapes", self, model_name)))
        groups = root.get("param_shapes")
        if not isinstance(groups, (list, tuple)):
            raise self._fail("its param_shapes is not a list of groups", model_name)
        shapes = [_shape_map(group, "param_shapes", self, model_name) for group in groups]
        found.update(self._zero3(shapes) if self.stage == 3 else self._zero12(shapes))
        shared = root.get("shared_params") or {}
        if not isinstance(shared, dict):
            raise self._fail("its shared_params is not a dict of names", model_name)
        for alias, target in shared.items():
            if isinstance(alias, str) and isinstance(target, str) and target in found:
                found[alias] = found[target]
        return found

    # -- the flat partitions -----------------------------------------------------------------------

    def _flat_groups(self, shard: str) -> list[tuple[str, int]]:
        """The reader name and length of each flat fp32 group in optimizer-states `shard`."""
        reader = self.readers[shard]
        stage, world_size = zero_settings(reader, shard, self.folder)
        if (stage, world_size) != (self.stage, self.world_size):
            raise self._fail(
                f"says ZeRO stage {stage} on {world_size} ranks, but rank 0's file "
                f"says stage {self.stage} on {self.world_size}",
                shard,
            )
        groups = _optimizer_state(reader, shard, self.folder).get(self.groups_key)
        if not isinstance(groups, (list, tuple)):
            raise self._fail(f"holds no list {self.groups_key}", shard)
        found = []
        for index in range(len(groups)):
            tensor = f"optimizer_state_dict.{self.groups_key}.{index}"
            if tensor not in reader:
                raise self._fail(f"its {self.groups_key}[{index}] is not a tensor", shard)
            info = reader.descriptor(tensor)
            if len(info.shape) != 1 or info.dtype != F32:
                raise self._fail(
                    f"its {self.groups_key}[{index}] is {info.dtype.name} "
                    f"{list(info.shape)}, not a flat F32 partition",
                    shard,
                )
            found.append((tensor, info.shape[0]))
        return found

    def _zero12(self, shapes: list[dict[str, tuple[int, ...]]]) -> dict[str, Gathered | Stored]:
        """Each trainable parameter's pieces: its range of its group's ranks, joined."""
        if len(shapes) != len(self.flat[0]):
            raise self._fail(
                f"its param_shapes has {len(shapes)} groups, but the optimizer "
                f"states hold {len(self.flat[0])}",
                self.model_names[0],
            )
        paddings = self._alignment_paddings(shapes)
        align = 2 * self.world_size
        found: dict[str, Gathered | Stored] = {}
        for group, group_shapes in enumerate(shapes):
            parts = [
                (self.optim_names[rank], *self.flat[rank][group]) for rank in range(self.world_size)
            ]
            total = sum(numel for _, _, numel in parts)
            offset = 0
            for index, (name, shape) in enumerate(group_shapes.items()):
                numel = math.prod(shape)
                if offset + numel > total:
                    raise SetError(
                        f"lies at elements {bounded_int(offset)} to {bounded_int(offset + numel)} "
                        f"of parameter group {group}, but the ranks' partitions of it hold "
                        f"{' + '.join(bounded_int(n) for _, _, n in parts)} elements",
                        path=self.folder,
                        tensor=name,
                        shard=_odd_rank(parts),
                    )
                found[name] = Gathered(F32, shape, _cut(parts, offset, offset + numel))
                offset += numel + paddings[group][index]
            if -(-offset // align) != -(-total // align):  # equal once both are padded to `align`
                raise SetError(
                    f"parameter group {group}'s shapes account for {bounded_int(offset)} "
                    f"elements, but its partitions hold {bounded_int(total)}",
                    path=self.folder,
                    tensor=_last(group_shapes),
                    shard=_odd_rank(parts),
                )
        return found

    def _alignment_paddings(self, shapes: list[dict[str, tuple[int, ...]]]) -> list[list[int]]:
        """Elements after each parameter of each group (``param_alignment_paddings``; zeros in
        checkpoints older than it)."""
        shard = self.optim_names[0]
        saved = _optimizer_state(self.readers[shard], shard, self.folder).get(
            "param_alignment_paddings"
        )
        if saved is None:
            return [[0] * len(group) for group in shapes]
        if (
            not isinstance(saved, (list, tuple))
            or len(saved) != len(shapes)
            or not all(
                isinstance(group, (list, tuple))
                and len(group) == len(sizes)
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in group)
                for group, sizes in zip(saved, shapes, strict=True)
            )
        ):
            raise self._fail(
                "its param_alignment_paddings is not one list of element counts "
                "per parameter group, one count per parameter",
                shard,
            )
        return [list(group) for group in saved]

    def _zero3(self, shapes: list[dict[str, tuple[int, ...]]]) -> dict[str, Gathered | Stored]:
        """Each trainable parameter's pieces: its share at the same offset of every rank."""
        sizes = [numel for _, numel in self.flat[0]]
        for rank in range(1, self.world_size):
            if [numel for _, numel in self.flat[rank]] != sizes:
                raise self._fail(
                    f"its fp32_flat_groups hold {[n for _, n in self.flat[rank]]} "
                    f"elements, but rank 0's hold {sizes}: every rank holds an "
                    "equal share",
                    self.optim_names[rank],
                )
        joined = [list(self._joined_groups(rank)) for rank in range(self.world_size)]
        available = sum(sizes)
        offset = 0
        found: dict[str, Gathered | Stored] = {}
        for group in shapes:  # one sequence of shares across the groups, in group order
            for name, shape in group.items():
                numel = math.prod(shape)
                share = -(-numel // self.world_size)
                if offset + share > available:
                    raise SetError(
                        f"its share of {bounded_int(share)} elements lies at {bounded_int(offset)} "
                        f"of each rank's flat groups, which hold {bounded_int(available)}",
                        path=self.folder,
                        tensor=name,
                        shard=self.optim_names[-1],
                    )
                pieces = _shares(joined, offset, share, numel)
                found[name] = Gathered(F32, shape, pieces)
                offset += share
        if offset != available:
            raise SetError(
                f"the parameters' shares take {bounded_int(offset)} elements of each "
                f"rank's flat groups, but they hold {bounded_int(available)}",
                path=self.folder,
                shard=self.optim_names[0],
            )
        return found

    def _joined_groups(self, rank: int) -> list[tuple[str, str, int]]:
        return [(self.optim_names[rank], tensor, numel) for tensor, numel in self.flat[rank]]

    def _frozen(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, Gathered | Stored]:
        """Frozen parameters from the model states' fragments: whole in stages 1 and 2, one
        share per rank's model states in stage 3."""
        found: dict[str, Gathered | Stored] = {}
        for name, shape in shapes.items():
            tensor = f"frozen_param_fragments.{name}"
            numel = math.prod(shape)
            if self.stage != 3:
                found[name] = _stored(
                    self.readers[self.model_names[0]], self.model_names[0], tensor, None, shape
                )
                continue
            parts = []
            for shard in self.model_names:
                reader = self.readers[shard]
                if tensor not in reader or len(reader.descriptor(tensor).shape) != 1:
                    raise SetError(
                        "has no flat fragment of this frozen parameter",
                        path=self.folder,
                        tensor=name,
                        shard=shard,
                    )
                parts.append((shard, tensor, reader.descriptor(tensor).shape[0]))
            dtypes = {self.readers[shard].descriptor(tensor).dtype for shard, _, _ in parts}
            if len(dtypes) != 1 or sum(n for _, _, n in parts) < numel:
                raise SetError(
                    f"its fragments hold {' + '.join(str(n) for _, _, n in parts)} "
                    f"elements of {', '.join(sorted(d.name for d in dtypes))}, not "
                    f"{bounded_int(numel)} of one dtype",
                    path=self.folder,
                    tensor=name,
                    shard=_odd_rank(parts),
                )
            found[name] = Gathered(dtypes.pop(), shape, _cut(parts, 0, numel))
        return found

    def _fail(self, detail: str, shard: str) -> SetError:
        return SetError(detail, path=self.folder, shard=shard)


# -- decoded values --------------------------------------------------------------------------------


def _optimizer_state(reader: PytorchReader, shard: str, folder: str) -> dict[object, object]:
    root = reader.load_object()
    state = root.get("optimizer_state_dict") if isinstance(root, dict) else None
    if not isinstance(state, dict):
        raise SetError(
            "is not a DeepSpeed optimizer-states file (no optimizer_state_dict)",
            path=folder,
            shard=shard,
        )
    return state


def _stage(value: object) -> int | None:
    """The stage `value` records: an int, or DeepSpeed's ``ZeroStageEnum(n)`` as the reader
    keeps it (an inert record of the call); None for anything else."""
    from weightstore.pytorch_reader import InertObject

    if isinstance(value, InertObject) and value.class_name.endswith(".ZeroStageEnum"):
        value = value.args[0] if len(value.args) == 1 else None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 3:
        return value
    return None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _module(reader: PytorchReader) -> list[str]:
    """The names of the model states' ``module`` tensors, in their order."""
    return [name[len("module.") :] for name in reader.names() if name.startswith("module.")]


def _stored(
    reader: PytorchReader,
    shard: str,
    tensor: str,
    float_as: DType | None,
    shape: tuple[int, ...] | None = None,
) -> Stored:
    """Tensor `tensor` of `reader`, its floating values read as `float_as` when given; with
    `shape`, checked to have it (`SetError` naming `shard` else)."""
    if tensor not in reader:
        raise SetError(
            f"holds no tensor {bounded_repr(tensor, limit=_SHOWN)}",
            path=os.path.dirname(reader.path),
            shard=shard,
        )
    info = reader.descriptor(tensor)
    name = tensor.partition(".")[2]
    if shape is not None and tuple(info.shape) != shape:
        raise SetError(
            f"holds it as {list(info.shape)}, but its shape is saved as {list(shape)}",
            path=os.path.dirname(reader.path),
            tensor=name,
            shard=shard,
        )
    dtype = float_as if float_as is not None and info.dtype.is_float else info.dtype
    return Stored(dtype, tuple(info.shape), shard, tensor)


def _string_list(value: object, what: str, builder: _Builder, shard: str) -> set[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise builder._fail(f"its {what} is not a list of names", shard)
    return set(value)


def _shape_map(
    value: object, what: str, builder: _Builder, shard: str
) -> dict[str, tuple[int, ...]]:
    """A ``name -> shape`` dict of the model states, each shape checked to be one."""
    if not isinstance(value, dict):
        raise builder._fail(f"its {what} is not a dict of shapes", shard)
    found: dict[str, tuple[int, ...]] = {}
    for name, shape in value.items():
        if (
            not isinstance(name, str)
            or not isinstance(shape, (list, tuple))
            or not (
                len(shape) <= _MAX_NDIM
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
            )
        ):
            raise SetError(
                f"its {what} gives {bounded_repr(shape, limit=_SHOWN)}, not a shape",
                path=builder.folder,
                tensor=bounded_repr(name, limit=_SHOWN),
                shard=shard,
            )
        found[name] = tuple(shape)
    return found


# -- element ranges -------------------------------------------------------------------------------


def _cut(parts: list[tuple[str, str, int]], start: int, stop: int) -> tuple[Piece, ...]:
    """Elements ``[start, stop)`` of `parts` (file, tensor, length) joined, as pieces."""
    pieces = []
    position = 0
    for file, tensor, numel in parts:
        low, high = max(start, position), min(stop, position + numel)
        if low < high:
            pieces.append(Piece(file, tensor, low - position, high - position))
        position += numel
    return tuple(pieces)


def _shares(
    joined: list[list[tuple[str, str, int]]], offset: int, share: int, numel: int
) -> tuple[Piece, ...]:
    """A stage-3 parameter's pieces: `share` elements at `offset` of each rank's joined
    groups, in rank order, the whole cut to its `numel` elements (the padding dropped)."""
    pieces: list[Piece] = []
    for rank, groups in enumerate(joined):
        wanted = min(share, numel - rank * share)
        if wanted <= 0:
            break
        pieces.extend(_cut(groups, offset, offset + wanted))
    return tuple(pieces)


def _odd_rank(parts: list[tuple[str, str, int]]) -> str:
    """The file to blame for partitions that do not add up: the first before the last whose
    length differs from rank 0's (all but the last rank hold equal partitions), else the last."""
    for file, _, numel in parts[1:-1]:
        if numel != parts[0][2]:
            return file
    return parts[-1][0]


def _last(shapes: dict[str, tuple[int, ...]]) -> str | None:
    return next(reversed(shapes), None)
