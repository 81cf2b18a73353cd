"""Mutations of the quantized groups in a SafeTensors file: edit a part, keep the file valid.

A header edit that changes a shape or a dtype also breaks the data offsets, and the reader then
refuses the file before any group is recognised. So this mutator decodes the file into its
tensors (name, dtype, shape, bytes) and metadata, edits them as a producer's bug would, and lays
the file out again with every tensor's bytes resized to its new shape and dtype, so the file
opens and the edit reaches `recognise` and `dequantize_group`:

- a shape off by one (a scale with one block too many, a packed row one word short), a dim
  zeroed or made huge with zero elements, a dim added or dropped;
- a dtype changed within the layouts' dtypes (a scale F16 where F8_E4M3 is needed);
- values that decide sizes or divide: ``weight_shape`` changed, huge, negative or zero;
  ``g_idx`` out of range; a second scale (``weight_global_scale``, ``weight_scale_2``) or a
  scale set to inf, NaN, zero or a subnormal; E8M0 and E4M3 NaN bytes;
- a part dropped or renamed to another group's suffix; the metadata's ``quantization_config``
  edited (another method, other bits, group size or block size).

Files without a quantized-looking tensor are left to `fuzz.mutators.mutate_safetensors`.
"""

from __future__ import annotations

import json
import random
import struct
from typing import Any, Final

import numpy as np

__all__ = ["GROUP_SUFFIXES", "looks_quantized", "mutate_quantized"]

Rng = random.Random

GROUP_SUFFIXES: Final = (
    "_scale_inv", "weight_scale", "weight_scale_2", "weight_global_scale", "input_global_scale",
    "input_scale", "weight_packed", "weight_zero_point", "weight_shape", "weight_g_idx",
    "_blocks", "_scales",
)  # fmt: skip
"""Name endings of the parts of the layouts `weightstore.quantized.recognise` knows."""

ITEMSIZE: Final = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}  # fmt: skip
"""Bytes per element of the dtypes this mutator writes; a tensor of another dtype keeps its
bytes as they are."""

_NUMPY: Final = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4", "I8": "i1"}
_HOSTILE_FLOATS: Final = (
    float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-45, 3.4e38, -1.0, 1e30,
)  # fmt: skip
_HUGE_DIMS: Final = (2**31, 2**32, 2**40, 2**53, 2**62, 2**63 - 1)
_METHODS: Final = ("fp8", "mxfp4", "compressed-tensors", "modelopt", "gptq", None, 7)
_FORMATS: Final = ("pack-quantized", "nvfp4-pack-quantized", "float-quantized", "naive", None)

Tensor = dict[str, Any]  # {"name", "dtype", "shape", "data"}


def looks_quantized(data: bytes) -> bool:
    """Whether `data` is a SafeTensors file naming a quantized part (cheap: the header only)."""
    parsed = _decode(data)
    return parsed is not None and any(_is_part(t["name"]) for t in parsed[0])


def _is_part(name: str) -> bool:
    return name.endswith(GROUP_SUFFIXES)


def _decode(data: bytes) -> tuple[list[Tensor], dict[str, Any] | None] | None:
    """The tensors in file order and the metadata, or None when `data` is no plain file."""
    if len(data) < 8:
        return None
    (size,) = struct.unpack_from("<Q", data)
    try:
        header = json.loads(data[8 : 8 + size])
    except (ValueError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    body = data[8 + size :]
    metadata = header.pop("__metadata__", None)
    tensors = []
    for name, info in header.items():
        try:
            start, end = (int(at) for at in info["data_offsets"])
            shape = [int(dim) for dim in info["shape"]]
            tensors.append(
                {"name": name, "dtype": str(info["dtype"]), "shape": shape,
                 "data": body[start:end], "start": start}
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
    tensors.sort(key=lambda t: t["start"])
    return tensors, metadata if isinstance(metadata, dict) else None


def _encode(tensors: list[Tensor], metadata: dict[str, Any] | None) -> bytes:
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    offset, body = 0, []
    for tensor in tensors:
        header[tensor["name"]] = {
            "dtype": tensor["dtype"], "shape": tensor["shape"],
            "data_offsets": [offset, offset + len(tensor["data"])],
        }  # fmt: skip
        body.append(tensor["data"])
        offset += len(tensor["data"])
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(body)


def _resized(tensor: Tensor, rng: Rng) -> None:
    """`tensor`'s bytes cut or extended (random bytes) to what its dtype and shape need."""
    itemsize = ITEMSIZE.get(tensor["dtype"])
    if itemsize is None:
        return
    count = 1
    for dim in tensor["shape"]:
        count *= dim
    size = count * itemsize
    if size < 0 or size > 1 << 20:  # a huge claim stays in the header only: no bytes for it
        return
    data = tensor["data"][:size]
    tensor["data"] = data + rng.randbytes(size - len(data))


def _edit_shape(tensor: Tensor, rng: Rng) -> None:
    shape = tensor["shape"]
    roll = rng.randrange(6)
    if shape and roll < 3:
        dim = rng.randrange(len(shape))
        shape[dim] = max(0, shape[dim] + rng.choice((-1, 1, 1, shape[dim])))
    elif shape and roll == 3:  # zero elements, so any other dim may claim anything
        shape[rng.randrange(len(shape))] = 0
        shape[rng.randrange(len(shape))] = rng.choice(_HUGE_DIMS)
    elif roll == 4:
        shape.insert(rng.randrange(len(shape) + 1), rng.choice((1, 2)))
    elif shape:
        shape.pop(rng.randrange(len(shape)))
    _resized(tensor, rng)


def _edit_dtype(tensor: Tensor, rng: Rng) -> None:
    tensor["dtype"] = rng.choice(
        ("F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "U8", "I8", "I32", "I64", "U32")
    )
    _resized(tensor, rng)


def _values(tensor: Tensor) -> np.ndarray[Any, Any] | None:
    spec = _NUMPY.get(tensor["dtype"])
    if spec is None or not tensor["data"] or len(tensor["data"]) % np.dtype(spec).itemsize:
        return None
    return np.frombuffer(tensor["data"], spec).copy()


def _edit_values(tensor: Tensor, rng: Rng) -> None:
    """A value that decides a size, an index or a divisor, made hostile."""
    values = _values(tensor)
    if values is None:  # bytes: E8M0 255 (its NaN), E4M3 0x7F/0xFF (NaN), random
        data = bytearray(tensor["data"])
        for _ in range(rng.choice((1, 2, 8))):
            if data:
                data[rng.randrange(len(data))] = rng.choice((0x00, 0x7F, 0xFF, 0x80, 0xFE, 0x01))
        tensor["data"] = bytes(data)
        return
    at = rng.randrange(values.size)
    with np.errstate(over="ignore"):
        _edit_value(tensor, values, at, rng)
    tensor["data"] = values.tobytes()


def _edit_value(tensor: Tensor, values: np.ndarray[Any, Any], at: int, rng: Rng) -> None:
    if values.dtype.kind == "f":
        values[at] = rng.choice(_HOSTILE_FLOATS)
    elif tensor["name"].endswith("weight_shape"):
        choice = rng.randrange(5)
        if choice == 0:
            values[at] += rng.choice((-1, 1, 32))
        elif choice == 1:
            values[at] = rng.choice(_HUGE_DIMS) % (np.iinfo(values.dtype).max + 1)
        elif choice == 2:
            values[at] = rng.choice((0, -1, np.iinfo(values.dtype).min))
        else:
            values[:] = values[::-1]
    else:  # g_idx, zero points, packed codes
        info = np.iinfo(values.dtype)
        values[at] = rng.choice((min(int(values.max()) + 1, info.max), -1, info.max, info.min, 2))


def _edit_config(metadata: dict[str, Any] | None, rng: Rng) -> dict[str, Any]:
    metadata = dict(metadata or {})
    try:
        config = json.loads(metadata.get("quantization_config", "{}"))
    except (ValueError, RecursionError, TypeError):
        config = {}
    if not isinstance(config, dict):
        config = {}
    roll = rng.randrange(5)
    if roll == 0:
        config["quant_method"] = rng.choice(_METHODS)
    elif roll == 1:
        config["format"] = rng.choice(_FORMATS)
    elif roll == 2:
        config["weight_block_size"] = rng.choice(([1, 1], [128, 128], [0, 4], [2**40, 1], [3]))
    else:
        weights = {
            "num_bits": rng.choice((0, 1, 3, 4, 8, 9, 32)), "type": rng.choice(("int", "float")),
            "strategy": rng.choice(("group", "channel", "tensor", "block")),
            "group_size": rng.choice((None, 0, 1, 16, 32, 33, 2**40)),
        }  # fmt: skip
        config["config_groups"] = {"group_0": {"weights": weights}}
    metadata["quantization_config"] = json.dumps(config)
    return metadata


def mutate_quantized(data: bytes, rng: Rng) -> bytes | None:
    """`data` with one to three edits of its quantized parts (None: no such part, or no
    plain SafeTensors file)."""
    parsed = _decode(data)
    if parsed is None:
        return None
    tensors, metadata = parsed
    names = {t["name"] for t in tensors}
    parts = [t for t in tensors if _is_part(t["name"]) or _has_scale(t["name"], names)]
    if not parts:
        return None
    try:
        metadata = _edit(tensors, parts, metadata, rng)
    except OverflowError:  # a value past its dtype's range: no input this time
        return None
    if len({t["name"] for t in tensors}) != len(tensors):
        return None
    return _encode(tensors, metadata)


def _has_scale(name: str, names: set[str]) -> bool:
    """FP8 codes: a name beside its ``_scale_inv`` or ``_scale``."""
    return name + "_scale_inv" in names or name + "_scale" in names


def _edit(
    tensors: list[Tensor], parts: list[Tensor], metadata: dict[str, Any] | None, rng: Rng
) -> dict[str, Any] | None:
    """One to three edits of `parts` (some of `tensors`), in place; the metadata to write."""
    for _ in range(rng.choice((1, 1, 2, 3))):
        tensor = rng.choice(parts)
        roll = rng.randrange(10)
        if roll < 3:
            _edit_shape(tensor, rng)
        elif roll < 5:
            _edit_dtype(tensor, rng)
        elif roll < 8:
            _edit_values(tensor, rng)
        elif roll == 8 and len(tensors) > 1 and rng.random() < 0.5:
            tensors.remove(tensor)
            parts.remove(tensor)
            if not parts:
                break
        elif roll == 8 and tensor["name"].endswith("_blocks"):  # MXFP4 blocks: the scales' name
            tensor["name"] = tensor["name"][: -len("_blocks")] + rng.choice(("_scales", "_x"))
        elif roll == 8:  # the part renamed to another layout's suffix, same module
            stem = tensor["name"].rsplit(".", 1)[0] if "." in tensor["name"] else ""
            tensor["name"] = f"{stem}.{rng.choice(GROUP_SUFFIXES).lstrip('_')}".lstrip(".")
        else:
            metadata = _edit_config(metadata, rng)
    return metadata
