"""Quantized groups in a store: found once per read, carried whole, dequantized on request.

A store reads its source through `weightstore.quantized.QuantizedView`, which tells which
stored tensors form one quantized tensor. Without ``with_dequantize`` every part stays a
snapshot of its own, tagged with its group (`GroupPart`), so a copy keeps each part byte for
byte; remaps rename a group's companions with its codes and filters that would split a group
are refused. With it, each group is one snapshot under its logical name whose load decodes
straight to the dtype asked for (or to the model's, for a 16-bit parameter).

The checkpoint's ``quantization_config`` is read from the ``config.json`` beside a local file
or set (as Hugging Face checkpoints keep it), or from a ``quantization_config`` metadata pair.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from weightstore.errors import DTypeError, InvalidOptionError, MetadataError, RemapCollisionError

if TYPE_CHECKING:
    from weightstore.container._format import ContainerFormat, TensorReader
    from weightstore.dtypes import DType
    from weightstore.quantized import QuantizedGroup
    from weightstore.quantized._view import QuantizedView
    from weightstore.snapshot import TensorSnapshot

__all__ = [
    "DEQUANTIZE_DTYPES",
    "carried_config",
    "carry_group_renames",
    "dequantize_dtype",
    "groups_for_save",
    "quantization_config",
    "source_snapshots",
    "source_view",
    "unstorable_part",
]

DEQUANTIZE_DTYPES: Final = {
    "f32": "F32", "float32": "F32", "fp32": "F32",
    "bf16": "BF16", "bfloat16": "BF16",
    "f16": "F16", "float16": "F16", "fp16": "F16", "half": "F16",
}  # fmt: skip
"""What ``with_dequantize`` and ``convert --dequantize`` accept, lower-cased, and the dtype."""

CONFIG_LIMIT: Final = 16 << 20
"""The largest ``config.json`` read for its ``quantization_config`` (real ones are a few KB)."""


def dequantize_dtype(dtype: object) -> str:
    """The dtype name ``with_dequantize(dtype)`` means: ``"BF16"`` for ``"bf16"``, ``BF16``.

    Raises:
        InvalidOptionError: anything but F32, BF16 or F16 by one of their names.
    """
    name = getattr(dtype, "name", dtype)
    found = DEQUANTIZE_DTYPES.get(name.lower()) if isinstance(name, str) else None
    if found is None:
        raise InvalidOptionError(
            f"dequantize to {dtype!r}: quantized tensors dequantize to bf16, f16 or f32",
            option="dequantize",
        )
    return found


def quantization_config(path: str | None, reader: TensorReader) -> Mapping[str, object] | None:
    """The checkpoint's ``quantization_config``: from a ``quantization_config`` metadata pair
    (a JSON object), else from ``config.json`` beside the local file or set at `path`.

    Raises:
        MetadataError: a ``config.json`` or metadata pair that is not JSON, or over 16 MiB.
    """
    metadata = getattr(reader, "metadata", None)
    pairs = metadata() if metadata is not None else {}
    text = pairs.get("quantization_config") if isinstance(pairs, Mapping) else None
    if isinstance(text, str):
        found = _json_object(text, path, "the quantization_config metadata")
        return found
    config = _config_file(path)
    if config is None:
        return None
    with open(config, "rb") as file:
        data = file.read(CONFIG_LIMIT + 1)
    if len(data) > CONFIG_LIMIT:
        raise MetadataError(
            f"{config} is over {CONFIG_LIMIT >> 20} MiB: not a model's config.json", path=path
        )
    whole = _json_object(data, path, config)
    found = whole.get("quantization_config") if whole is not None else None
    return found if isinstance(found, Mapping) else None


def _config_file(path: str | None) -> str | None:
    """``config.json`` beside a local file or set, or in a local directory; else None."""
    if path is None or "://" in path:
        return None
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    config = os.path.join(directory, "config.json")
    return config if os.path.isfile(config) and config != os.path.abspath(path) else None


def _json_object(data: str | bytes, path: str | None, where: str) -> Mapping[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as err:
        raise MetadataError(f"{where} is not JSON: {err}", path=path) from None
    return value if isinstance(value, Mapping) else None


def source_view(reader: TensorReader, path: str | None) -> QuantizedView | None:
    """The view of `reader`'s quantized groups; None for a format that decodes its own
    quantized tensors (GGUF)."""
    if getattr(reader, "stored_encoding", None) is not None:
        return None
    from weightstore.quantized._view import QuantizedView

    return QuantizedView(reader, quantization_config(path, reader), path=path)


def source_snapshots(
    reader: TensorReader, path: str | None, dequantize: str | None
) -> list[TensorSnapshot]:
    """The store's snapshots of `reader`, in file order: quantized groups tagged part by part,
    or, with `dequantize` (a dtype name), one decoding snapshot per group. A file holding no
    dtype a group's codes have costs one set lookup per tensor beyond its snapshots."""
    from weightstore.quantized._view import CANDIDATE_DTYPES, QuantizedView
    from weightstore.snapshot import reader_snapshots

    if getattr(reader, "stored_encoding", None) is not None:  # GGUF decodes its own
        decoded = reader_snapshots(reader)
        return decoded if dequantize is None else [_values_only(s, dequantize) for s in decoded]
    is_quantized = getattr(reader, "is_quantized", None)  # torch's quantized tensors
    natives: frozenset[str] = frozenset()
    if is_quantized is not None:
        natives = frozenset(n for n in reader.names_in_file_order() if is_quantized(n))
    plain = reader_snapshots(reader, skip=natives)
    if not natives and not any(s.dtype.name in CANDIDATE_DTYPES for s in plain):
        return plain
    infos = None if natives else {s.full_path: (s.dtype.name, s.shape) for s in plain}
    view = QuantizedView(reader, quantization_config(path, reader), path=path, infos=infos)
    if not view.groups():
        return plain
    by_name = {s.full_path: s for s in plain}
    snapshots: list[TensorSnapshot] = []
    for name in view.stored_names():
        group = view.group_of(name)
        if group is None:
            snapshots.append(by_name[name])
        elif dequantize is not None:
            if name == group.codes:
                snapshots.append(_decoding(view, group, dequantize))
        else:
            snapshots.append(_tagged(view, group, name, by_name.get(name)))
    return snapshots


def _values_only(snapshot: TensorSnapshot, dtype_name: str) -> TensorSnapshot:
    """A GGUF tensor read dequantized: its values in `dtype_name`, no blocks to copy (a GGUF
    save then writes the values, as the option asks)."""
    from weightstore.dtypes import from_name
    from weightstore.snapshot import StoredBlocks, stored_blocks

    stored = stored_blocks(snapshot)
    if stored is None:
        return snapshot
    dtype = from_name(dtype_name)
    load = functools.partial(stored.read_as, dtype)
    values = StoredBlocks(stored.encoding, None, stored.read_as, load)
    return snapshot.replace(dtype=dtype, load=load, stored=values)


def _decoding(view: QuantizedView, group: QuantizedGroup, dtype_name: str) -> TensorSnapshot:
    """Group `group` as one snapshot of its values in `dtype_name`; a load into a 16-bit
    float parameter decodes straight to that parameter's dtype (`StoredBlocks.read_as`)."""
    from weightstore.dtypes import from_name
    from weightstore.snapshot import DecodedLoad, StoredBlocks, TensorSnapshot

    dtype = from_name(dtype_name)
    load = DecodedLoad(view.dequantized, group.name, dtype)  # a part decodes alone
    read_as = functools.partial(_decoded_as, view, group.name, dtype)
    stored = StoredBlocks(group.layout, None, read_as, load)
    return TensorSnapshot(
        tuple(group.name.split(".")), dtype, group.logical_shape, load, (), None, stored
    )


def _decoded_as(view: QuantizedView, name: str, asked: DType, target: DType) -> Any:
    """Group `name`'s values for a `target` float parameter: decoded straight to a 16-bit
    target; for a float32 one, in the dtype asked for, then widened (exact), so that
    ``with_dequantize("bf16")`` gives bfloat16 values whatever the model holds them in."""
    if target.name == "F32" and asked.name != "F32":
        return view.dequantized(name, asked).astype(target.numpy)
    return view.dequantized(name, target)


def _tagged(
    view: QuantizedView, group: QuantizedGroup, name: str, snapshot: TensorSnapshot | None
) -> TensorSnapshot:
    """Part `name` of `group` as a snapshot tagged with its group and role."""
    from weightstore.dtypes import from_numpy
    from weightstore.snapshot import GroupPart, ReaderLoad, TensorSnapshot

    role = "codes" if name == group.codes else _role(group, name)
    tag = GroupPart(group, role, view.quantization_config)
    if snapshot is not None:
        return snapshot.replace(group=tag)
    # A torch quantized tensor: listed with its codes' dtype; reading it says how to decode it.
    import numpy as np

    reader: Any = view.reader
    info = reader.quantized_info(name)
    dtype = from_numpy(np.dtype(info.code_dtype))
    load = ReaderLoad(reader.get, name)
    return TensorSnapshot(
        tuple(name.split(".")), dtype, tuple(info.shape), load, (), None, None, tag
    )


def _role(group: QuantizedGroup, part: str) -> str:
    return next(role for role, name in group.companions.items() if name == part)


# -- carried whole ---------------------------------------------------------------------------


def carry_group_renames(
    names: Mapping[str, str],
    by_old: Mapping[str, TensorSnapshot],
    path: str | None = None,
) -> dict[str, str]:
    """`names` (new -> old, as a remapper gives them) with each group's companions renamed
    along with its codes: when the codes' name changed and a companion's did not, the
    companion takes the codes' new prefix (``x.weight`` -> ``y.weight`` renames
    ``x.weight_scale_inv`` to ``y.weight_scale_inv``, ``x.input_scale`` to ``y.input_scale``).
    A companion the remapper renamed itself keeps that name.

    Raises:
        RemapCollisionError: a carried name lands on another tensor's name.
    """
    new_of = {old: new for new, old in names.items()}
    changed: dict[str, str] = {}
    for old, snapshot in by_old.items():
        tag = snapshot.group
        if tag is None or tag.role != "codes":
            continue
        codes_new = new_of.get(old, old)
        if codes_new == old:
            continue
        old_prefix, new_prefix = _changed_prefix(old, codes_new)
        for part in tag.group.companions.values():
            if part in by_old and new_of.get(part, part) == part and part.startswith(old_prefix):
                changed[part] = new_prefix + part[len(old_prefix) :]
    if not changed:
        return dict(names)
    result: dict[str, str] = {}
    for new, old in names.items():
        target = changed.get(old, new)
        if target in result:
            raise RemapCollisionError(target, result[target], old, path=path)
        result[target] = old
    return result


def _changed_prefix(old: str, new: str) -> tuple[str, str]:
    """The prefixes that differ once the longest common suffix is set aside."""
    common = 0
    limit = min(len(old), len(new))
    while common < limit and old[-1 - common] == new[-1 - common]:
        common += 1
    return old[: len(old) - common], new[: len(new) - common]


def groups_for_save(
    fmt: ContainerFormat, snapshots: Sequence[TensorSnapshot]
) -> Sequence[TensorSnapshot]:
    """`snapshots` as `fmt` holds their quantized tensors without dequantizing them: part by
    part where the format stores plain tensors; in GGUF an MXFP4 pair as one tensor of ggml
    MXFP4 blocks, a symmetric int8 or int4 group of 32-column groups as Q8_0 or Q4_0 blocks,
    and a GGUF MXFP4 tensor as the ``_blocks`` + ``_scales`` pair elsewhere, byte for byte
    every way (`mxfp4_to_ggml`, `int_group_to_ggml`).

    Raises:
        InvalidOptionError: a torch quantized tensor (its scales live in the pickle, which no
            other format has a place for), or a group GGUF has no block type for (FP8, NVFP4,
            asymmetric or other group sizes); each names the tensor, the layout, why and
            ``with_dequantize``.
    """
    from weightstore.snapshot import stored_blocks

    own_blocks = "quantize" in fmt.store_options  # a format of its own blocks (GGUF)
    grouped = [s for s in snapshots if s.group is not None]
    if not grouped and own_blocks:
        return snapshots
    partners = {(id(s.group.group), s.group.role): s for s in grouped if s.group is not None}
    kept: list[TensorSnapshot] = []
    for snapshot in snapshots:
        tag = snapshot.group
        if tag is None:
            stored = stored_blocks(snapshot)
            mxfp4 = stored is not None and stored.encoding == "MXFP4"
            if mxfp4 and not own_blocks and stored is not None and stored.read_blocks:
                kept.extend(_mxfp4_pair(snapshot, stored.read_blocks))
            else:
                kept.append(snapshot)
            continue
        group = tag.group
        if group.layout == "torch-affine":
            raise InvalidOptionError(
                f"{snapshot.full_path!r} is a torch quantized tensor ({group.rule}): its "
                f"scales and zero points live in the pickle, which {fmt.title} has no place "
                "for; read the source with .with_dequantize('bf16') (convert: --dequantize "
                "bf16) to save its values",
                option="dequantize",
                format=fmt.name,
            )
        if not own_blocks:
            kept.append(snapshot)
        elif group.layout == "mxfp4":
            if tag.role == "codes":
                kept.append(_ggml_mxfp4(snapshot, partners[(id(group), "scale")]))
        elif tag.role == "codes":
            roles = {role: s for (key, role), s in partners.items() if key == id(group)}
            kept.append(_ggml_int(group, roles, fmt))
    return kept


def _no_block_type(group: QuantizedGroup, part: str, why: str, fmt: ContainerFormat) -> Exception:
    return InvalidOptionError(
        f"{part!r} is part of a {group.layout} quantized tensor ({group.name!r}), which "
        f"{fmt.title} cannot hold as blocks: {why}; read the source with "
        ".with_dequantize('bf16') (convert: --dequantize bf16) to save its values",
        option="dequantize",
        format=fmt.name,
    )


def _ggml_int(
    group: QuantizedGroup, roles: Mapping[str, TensorSnapshot], fmt: ContainerFormat
) -> TensorSnapshot:
    """An int8 or int4 group as one snapshot of ggml Q8_0 / Q4_0 blocks, repacked byte for
    byte (`quantized._int_ggml`); refused naming why when ggml has no such block."""
    from weightstore.dtypes import from_name
    from weightstore.quantized._hf_dequantize import dequantize_group
    from weightstore.quantized._int_ggml import ggml_type_for, int_group_to_ggml, scale_as_float16
    from weightstore.snapshot import StoredBlocks, TensorSnapshot

    codes = roles["codes"]
    scale = roles.get("scale")
    ggml_type, why = ggml_type_for(group, "" if scale is None else scale.dtype.name)
    scale16 = None if ggml_type is None or scale is None else scale_as_float16(scale.to_numpy())
    if ggml_type is not None and scale16 is None and scale is not None:
        why = f"its {scale.dtype.name} scales are not all exact in float16, ggml's"
    if ggml_type is None or scale16 is None:
        raise _no_block_type(group, codes.full_path, why, fmt)
    stored = codes.full_path  # the names as saved (a remap may have renamed the group)
    named = group.replace(
        name=stored.removesuffix("_packed") if group.layout == "int-pack" else stored,
        codes=stored,
        companions={role: roles[role].full_path for role in group.companions},
    )
    f32 = from_name("F32")

    def arrays() -> dict[str, Any]:
        return {s.full_path: s.to_numpy() for s in roles.values()}

    def values(dtype: Any = f32) -> Any:
        wanted = from_name(dtype) if isinstance(dtype, str) else dtype
        return dequantize_group(named, arrays(), wanted.numpy)

    def ggml_blocks() -> Any:
        return int_group_to_ggml(named, ggml_type, arrays(), scale16)

    load = functools.partial(values, f32)
    blocks = StoredBlocks(ggml_type, ggml_blocks, values, load)
    return TensorSnapshot(
        tuple(named.name.split(".")), f32, named.logical_shape, load, codes.container, None,
        blocks,
    )  # fmt: skip


def unstorable_part(
    err: DTypeError, fmt: ContainerFormat, snapshots: Sequence[TensorSnapshot]
) -> Exception:
    """`err` (a dtype `fmt` cannot hold) as a refusal naming the quantized tensor and
    ``with_dequantize`` when the tensor is one of a group's parts (burnpack has no FP8), else
    `err` itself."""
    tag = next((s.group for s in snapshots if s.full_path == err.tensor), None)
    if tag is None:
        return err
    group = tag.group
    return InvalidOptionError(
        f"{err.tensor!r} is the {tag.role} of a {group.layout} quantized tensor "
        f"({group.name!r}), and {err.detail}: read the source with .with_dequantize('bf16') "
        "(convert: --dequantize bf16) to save its values",
        option="dequantize",
        format=fmt.name,
    )


_BLOCKS, _SCALES = "_blocks", "_scales"


def _ggml_mxfp4(blocks: TensorSnapshot, scales: TensorSnapshot) -> TensorSnapshot:
    """An MXFP4 pair as one snapshot: its values, and the ggml blocks a GGUF writer copies."""
    from weightstore.dtypes import from_name
    from weightstore.quantized._group import QuantizedGroup
    from weightstore.quantized._hf_mxfp4 import dequantize_mxfp4_group
    from weightstore.quantized._mxfp4_ggml import mxfp4_to_ggml
    from weightstore.snapshot import StoredBlocks, TensorSnapshot

    assert blocks.group is not None
    stored_name = blocks.full_path
    name = stored_name[: -len(_BLOCKS)] if stored_name.endswith(_BLOCKS) else stored_name
    group = QuantizedGroup(
        name=name, layout="mxfp4", codes=stored_name, companions={"scale": scales.full_path},
        logical_shape=blocks.group.group.logical_shape, block=blocks.group.group.block,
        rule=blocks.group.group.rule,
    )  # fmt: skip

    f32 = from_name("F32")

    def values(dtype: Any = f32) -> Any:
        parts = {stored_name: blocks.to_numpy(), scales.full_path: scales.to_numpy()}
        wanted = from_name(dtype) if isinstance(dtype, str) else dtype
        return dequantize_mxfp4_group(group, parts, wanted.numpy)

    def ggml_blocks() -> Any:
        return mxfp4_to_ggml(
            blocks.to_numpy(), scales.to_numpy(), group=name, blocks_name=stored_name,
            scales_name=scales.full_path,
        )  # fmt: skip

    load = functools.partial(values, f32)
    stored = StoredBlocks("MXFP4", ggml_blocks, values, load)
    return TensorSnapshot(
        tuple(name.split(".")), f32, group.logical_shape, load, blocks.container, None, stored
    )


def _mxfp4_pair(snapshot: TensorSnapshot, read_blocks: Any) -> list[TensorSnapshot]:
    """A GGUF MXFP4 tensor as gpt-oss's ``_blocks`` + ``_scales`` pair, repacked."""
    from weightstore.dtypes import from_name
    from weightstore.quantized._mxfp4_ggml import ggml_to_mxfp4
    from weightstore.snapshot import TensorSnapshot

    shape, name, u8 = snapshot.shape, snapshot.full_path, from_name("U8")
    count = shape[-1] // 32

    def part(index: int) -> Any:
        return ggml_to_mxfp4(read_blocks(), shape, tensor=name)[index]

    return [
        TensorSnapshot(
            tuple(f"{name}{_BLOCKS}".split(".")), u8, (*shape[:-1], count, 16),
            functools.partial(part, 0), snapshot.container,
        ),
        TensorSnapshot(
            tuple(f"{name}{_SCALES}".split(".")), u8, (*shape[:-1], count),
            functools.partial(part, 1), snapshot.container,
        ),
    ]  # fmt: skip


def carried_config(snapshots: Sequence[TensorSnapshot]) -> str | None:
    """The ``quantization_config`` metadata pair a save of `snapshots` writes: the JSON of
    the config their groups were recognised by, or None when none was (names alone, or no
    group). Without it a copy saved away from the source's ``config.json`` would be
    recognised by names alone, which for FP8 blocks the scale grid does not imply (64x64 on
    300 rows reads as 60-row blocks) gives other values."""
    for snapshot in snapshots:
        tag = snapshot.group
        if tag is not None and tag.config is not None:
            return json.dumps(tag.config, sort_keys=True)
    return None
