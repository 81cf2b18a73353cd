"""Burn's ``QFloat`` tensors: their `QuantScheme`, their byte length, and their dequantization.

Format-free: the scheme comes in as the plain mapping a burnpack descriptor decodes to, the
tensor as its bytes. The rules are Burn's (burn-std ``quantization.rs`` and cubecl-common
``quant/scheme.rs``, the commit ``docs/burnpack.md`` names):

* bytes = values, then the block scales (row-major over the block grid), then, for a two-level
  scheme, the per-tensor scale; densely, no padding between the parts; little-endian.
* ``Native`` and ``PackedNative`` stores hold one value per byte (two's complement ``i8``);
  ``PackedU32(d)`` packs ``32 / bits`` values per little-endian ``u32`` along the dim ``d``
  counted from the innermost, value ``i`` of a word in bits ``[i * bits, (i + 1) * bits)``,
  sign-extended from ``bits``; each line of that dim is padded to whole words.
* symmetric: ``x = scale * q`` in float32, where a two-level scheme's scale is
  ``float32(global * block_scale)``, as Burn's reference backend (burn-ndarray) computes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._boxes import range_slice
from weightstore.base._lazy import import_on_first_use
from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.errors import DescriptorError, DTypeError

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # parsing a scheme needs no NumPy

__all__ = [
    "BURN_DEQUANTIZABLE_VALUES",
    "BurnPart",
    "BurnQuantScheme",
    "burn_qfloat_nbytes",
    "check_burn_qfloat",
    "dequantize_burn_part",
    "dequantize_burn_qfloat",
    "parse_burn_scheme",
    "plan_burn_part",
]

VALUE_BITS: Final = {
    "Q8F": 8, "Q8S": 8, "E4M3": 8, "E5M2": 8, "Q4F": 4, "Q4S": 4, "E2M1": 4, "Q2F": 2, "Q2S": 2,
}  # fmt: skip
"""Bits of one quantized value (cubecl ``QuantValue::size_bits``)."""

BURN_DEQUANTIZABLE_VALUES: Final = frozenset({"Q8S", "Q4S", "Q2S", "Q8F", "Q4F", "Q2F"})
"""Integer values, read as ``scale * q``; the float ones (E4M3, E5M2, E2M1) are not decoded."""

SCALE_SIZES: Final = {"F32": 4, "F16": 2, "BF16": 2, "UE8M0": 1, "UE4M3": 1}
"""Bytes of one stored scale (burn-std ``scale_size``)."""

_STORES: Final = ("Native", "PackedNative", "PackedU32")
_BLOCK_SLOTS: Final = 5  # cubecl's BlockSize::MAX_DIMS
_CHUNK_ELEMENTS: Final = 1 << 20  # float32 temporaries stay this size, not the tensor's


class BurnQuantScheme(ValueRecord):
    """A decoded, checked `QuantScheme`.

    Attributes:
        value: ``"Q8S"``, ``"Q4S"``, ``"Q2S"``, ... (cubecl ``QuantValue``).
        store: ``"Native"``, ``"PackedNative"`` or ``"PackedU32"``.
        packed_dim: for a packed store, the packed dim counted from the innermost (0 = last).
        mode: ``"Symmetric"`` or ``"Lookup"``.
        tensor_scale: the per-tensor level's scale dtype as resolved by Burn: a scheme with no
            level at all has an F32 per-tensor scale; ``None`` for a block-only scheme.
        block: the block's dims, rank-relative (``(32,)`` is 32 along the innermost dim), or
            ``None`` for per-tensor.
        block_scale: the block level's scale dtype, or ``None``.
    """

    value: str
    store: str
    packed_dim: int | None
    mode: str
    tensor_scale: str | None
    block: tuple[int, ...] | None
    block_scale: str | None

    @property
    def bits(self) -> int:
        """Bits of one value."""
        return VALUE_BITS[self.value]

    @property
    def num_quants(self) -> int:
        """Values held by one storage element (cubecl ``num_quants``)."""
        if self.store == "PackedU32":
            return 32 // self.bits
        return 1  # Native, and PackedNative of an integer value (native packing 1)

    @property
    def storage_bytes(self) -> int:
        """Bytes of one storage element."""
        return 4 if self.store == "PackedU32" else -(-self.bits // 8)

    @property
    def scale_dtype(self) -> str:
        """The dtype of the per-position scales (the innermost level's)."""
        return self.block_scale or self.tensor_scale or "F32"

    @property
    def global_scale(self) -> str | None:
        """The per-tensor scale's dtype in a two-level scheme, which follows the block scales."""
        return self.tensor_scale if self.block is not None else None

    @property
    def logical_dtype(self) -> str:
        """What the tensor holds before quantization, and dequantizes to by default."""
        return "F32"

    def block_dims(self, rank: int) -> tuple[int, ...]:
        """The block over a tensor of `rank` dims, missing leading dims filled with 1."""
        block = self.block or ()
        return (1,) * (rank - len(block)) + block

    def scale_grid(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The block scales' grid: blocks per dim (a partial block takes a scale); ``(1,)``
        per tensor."""
        if self.block is None:
            return (1,)
        return tuple(
            -(-dim // block) for dim, block in zip(shape, self.block_dims(len(shape)), strict=True)
        )

    def storage_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The stored elements' shape: the packed dim divided (rounded up per line)."""
        quants = self.num_quants
        if quants > 1 and shape:
            axis = len(shape) - 1 - (self.packed_dim or 0)
            return (*shape[:axis], -(-shape[axis] // quants), *shape[axis + 1 :])
        return (-(-math.prod(shape) // quants),)


def parse_burn_scheme(
    scheme: Mapping[str, Any], *, path: str | None = None, tensor: str | None = None
) -> BurnQuantScheme:
    """`scheme` (the decoded ``{"QFloat": ...}`` map's value) as a `BurnQuantScheme`.

    Raises:
        DescriptorError: a field is missing or holds what Burn's serde would refuse.
    """

    def fail(what: str) -> DescriptorError:
        return DescriptorError(f"QFloat scheme {what}", path=path, tensor=tensor)

    if not isinstance(scheme, Mapping):
        raise fail(f"is {type(scheme).__name__}, not a map")
    missing = [key for key in ("value", "store", "mode", "tensor", "block") if key not in scheme]
    if missing:
        raise fail(f"lacks {', '.join(missing)}")
    value = scheme["value"]
    if not isinstance(value, str) or value not in VALUE_BITS:
        raise fail(f"value {bounded_repr(value)} is not a QuantValue")
    store, packed_dim = _parse_store(scheme["store"], fail)
    mode = scheme["mode"]
    if mode not in ("Symmetric", "Lookup"):
        raise fail(f"mode {bounded_repr(mode)} is not a QuantMode")
    tensor_scale = scheme["tensor"]
    if tensor_scale is not None and not _is_scale_dtype(tensor_scale):
        raise fail(f"tensor scale {bounded_repr(tensor_scale)} is not a ScaleDtype")
    block, block_scale = _parse_block(scheme["block"], fail)
    if tensor_scale is None and block is None:
        tensor_scale = "F32"  # QuantScheme::tensor_scale's resolution
    return BurnQuantScheme(value, store, packed_dim, mode, tensor_scale, block, block_scale)


def _is_scale_dtype(value: object) -> bool:
    return isinstance(value, str) and value in SCALE_SIZES


def _is_small_uint(value: object, limit: int) -> bool:
    return type(value) is int and 0 <= value <= limit


def _parse_store(store: object, fail: Any) -> tuple[str, int | None]:
    if store == "Native":
        return "Native", None
    if isinstance(store, Mapping) and len(store) == 1:
        ((kind, dim),) = store.items()
        if kind in _STORES[1:] and _is_small_uint(dim, 2**64 - 1):
            return str(kind), int(dim)
    raise fail(f"store {bounded_repr(store)} is not a QuantStore")


def _parse_block(block: object, fail: Any) -> tuple[tuple[int, ...] | None, str | None]:
    if block is None:
        return None, None
    if not isinstance(block, Mapping) or set(block) != {"size", "dtype"}:
        raise fail(f"block {bounded_repr(block)} is not a BlockScale")
    size, dtype = block["size"], block["dtype"]
    if not _is_scale_dtype(dtype):
        raise fail(f"block scale {bounded_repr(dtype)} is not a ScaleDtype")
    if not isinstance(size, Mapping) or set(size) != {"storage", "len"}:
        raise fail(f"block size {bounded_repr(size)} is not a BlockSize")
    storage, length = size["storage"], size["len"]
    if (
        not isinstance(storage, list)
        or len(storage) != _BLOCK_SLOTS
        or not all(_is_small_uint(item, 255) and item > 0 for item in storage)
        or not _is_small_uint(length, _BLOCK_SLOTS)
    ):
        raise fail(f"block size {bounded_repr(size)} is not a BlockSize")
    return tuple(storage[:length]), str(dtype)


def burn_qfloat_nbytes(scheme: BurnQuantScheme, shape: tuple[int, ...]) -> int:
    """Bytes a tensor of `shape` takes under `scheme` (burn-std ``quantized_data_len``)."""
    return _byte_regions(scheme, shape)[2]


def _byte_regions(scheme: BurnQuantScheme, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """Where, in a QFloat tensor's bytes, the values end, the scales end, and (after a
    two-level scheme's per-tensor scale) the tensor ends."""
    values = math.prod(scheme.storage_shape(shape)) * scheme.storage_bytes
    scales = values + math.prod(scheme.scale_grid(shape)) * SCALE_SIZES[scheme.scale_dtype]
    glob = scheme.global_scale
    return values, scales, scales + (SCALE_SIZES[glob] if glob is not None else 0)


def check_burn_qfloat(
    scheme: BurnQuantScheme,
    shape: tuple[int, ...],
    nbytes: int,
    *,
    path: str | None = None,
    tensor: str | None = None,
) -> None:
    """Refuse what cannot be dequantized, before anything is read or allocated.

    Raises:
        DTypeError: a scheme Burn does not dequantize this way (float values, lookup mode,
            UE8M0 scales, which Burn itself does not decode).
        DescriptorError: the packed dim or block exceeds the tensor's rank, or `nbytes` is not
            the length `shape` and `scheme` give.
    """
    if scheme.value not in BURN_DEQUANTIZABLE_VALUES or scheme.mode != "Symmetric":
        raise DTypeError(
            f"QFloat {scheme.value} ({scheme.mode}) is not dequantized: only symmetric "
            f"{', '.join(sorted(BURN_DEQUANTIZABLE_VALUES))} are; get_bytes() gives the bytes",
            path=path,
            tensor=tensor,
        )
    for level in (scheme.scale_dtype, scheme.global_scale):
        if level == "UE8M0":
            raise DTypeError(
                "QFloat UE8M0 scales are not dequantized (Burn does not decode them either)",
                path=path,
                tensor=tensor,
            )
    if scheme.num_quants > 1 and shape and (scheme.packed_dim or 0) >= len(shape):
        raise DescriptorError(
            f"QFloat packed dim {scheme.packed_dim} (from the innermost) is outside shape "
            f"{list(shape)}",
            path=path,
            tensor=tensor,
        )
    if scheme.block is not None and len(scheme.block) > len(shape):
        raise DescriptorError(
            f"QFloat block {list(scheme.block)} has more dims than shape {list(shape)}",
            path=path,
            tensor=tensor,
        )
    expected = burn_qfloat_nbytes(scheme, shape)
    if nbytes != expected:
        raise DescriptorError(
            f"QFloat data is {nbytes:,} bytes, but shape {list(shape)} under {scheme.value} "
            f"{scheme.store} with {_describe_scales(scheme, shape)} needs {expected:,}",
            path=path,
            tensor=tensor,
        )


def _describe_scales(scheme: BurnQuantScheme, shape: tuple[int, ...]) -> str:
    if scheme.block is None:
        return f"one {scheme.scale_dtype} scale"
    grid = "x".join(str(n) for n in scheme.scale_grid(shape))
    text = f"{grid} {scheme.scale_dtype} block scales (block {list(scheme.block)})"
    return text + (f" and an {scheme.global_scale} tensor scale" if scheme.global_scale else "")


def dequantize_burn_qfloat(
    data: bytes | memoryview,
    shape: tuple[int, ...],
    scheme: BurnQuantScheme,
    dtype: np.dtype[Any] | None = None,
    *,
    path: str | None = None,
    tensor: str | None = None,
) -> np.ndarray[Any, Any]:
    """The tensor `data` holds, dequantized to `dtype` (float32 by default; float16 or
    bfloat16 are rounded from float32 one chunk at a time, never from a float32 copy of the
    whole tensor).

    Raises:
        DTypeError, DescriptorError: as `check_burn_qfloat`; DescriptorError also for a
            non-finite scale.
    """
    view = memoryview(data).cast("B")
    check_burn_qfloat(scheme, shape, view.nbytes, path=path, tensor=tensor)
    output = np.dtype(np.float32) if dtype is None else np.dtype(dtype)
    storage = scheme.storage_shape(shape)
    value_bytes, scale_end, _ = _byte_regions(scheme, shape)
    grid = scheme.scale_grid(shape)
    scales = _decode_scales(view[value_bytes:scale_end], scheme.scale_dtype).reshape(grid)
    if scheme.global_scale is not None:
        global_scale = _decode_scales(view[scale_end:], scheme.global_scale)
        scales = (global_scale[0] * scales).astype(np.float32)  # Burn: f32(global * block)
    if not np.isfinite(scales).all():
        raise DescriptorError("QFloat scales are not all finite", path=path, tensor=tensor)
    codes = _codes(view[:value_bytes], shape, storage, scheme)
    if scheme.block is None or not shape:
        return _scaled_flat(codes, scales.reshape(-1)[0], shape, output)
    return _scaled_blocks(codes, scales, scheme.block_dims(len(shape)), output)


def _decode_scales(raw: memoryview, dtype: str) -> np.ndarray[Any, Any]:
    if dtype == "UE4M3":
        return _e4m3_table()[np.frombuffer(raw, np.uint8)]
    if dtype == "BF16":
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32)
    stored = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[dtype])
    return stored.astype(np.float32)


def _e4m3_table() -> np.ndarray[Any, Any]:
    """float32 of each e4m3fn byte (cubecl's ``e4m3``: no infinities, S.1111.111 is NaN)."""
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent, mantissa = (bits >> 3) & 0xF, bits & 0x7
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent - 7.0)
    values = sign * np.where(exponent == 0, mantissa / 8.0 * 2.0**-6, normal)
    values[(exponent == 15) & (mantissa == 7)] = np.nan
    return values.astype(np.float32)


def _codes(
    raw: memoryview, shape: tuple[int, ...], storage: tuple[int, ...], scheme: BurnQuantScheme
) -> np.ndarray[Any, Any]:
    """The signed codes in the logical shape (``int8``; a view where one byte holds one)."""
    if scheme.num_quants == 1:
        return np.frombuffer(raw, np.int8).reshape(shape)
    words = np.frombuffer(raw, "<u4").reshape(storage)
    if not shape:
        return _unpack(words, scheme.bits, scheme.num_quants)[:1].reshape(())
    axis = len(shape) - 1 - (scheme.packed_dim or 0)
    return _unpack_along(words, axis, shape[axis], scheme)


def _unpack_along(
    words: np.ndarray[Any, Any], axis: int, length: int, scheme: BurnQuantScheme
) -> np.ndarray[Any, Any]:
    """Words packed along `axis` as the first `length` signed codes of each line."""
    lines = np.moveaxis(words, axis, -1)
    unpacked = _unpack(lines, scheme.bits, scheme.num_quants)[..., :length]
    return np.moveaxis(unpacked, -1, axis)


def _unpack(words: np.ndarray[Any, Any], bits: int, quants: int) -> np.ndarray[Any, Any]:
    """Each word's values, lowest bits first, sign-extended: ``(..., n) -> (..., n * quants)``."""
    mask = (1 << bits) - 1
    fields = [((words >> (i * bits)) & mask).astype(np.uint8) for i in range(quants)]
    raw = np.stack(fields, axis=-1).reshape(*words.shape[:-1], words.shape[-1] * quants)
    shift = 8 - bits
    signed: np.ndarray[Any, Any] = (raw << shift).view(np.int8) >> shift
    return signed


def _scaled_flat(
    codes: np.ndarray[Any, Any], scale: Any, shape: tuple[int, ...], output: np.dtype[Any]
) -> np.ndarray[Any, Any]:
    out = np.empty(shape, output)
    flat_codes, flat_out = codes.reshape(-1), out.reshape(-1)
    scale32 = np.float32(scale)
    for start in range(0, flat_codes.size, _CHUNK_ELEMENTS):
        chunk = flat_codes[start : start + _CHUNK_ELEMENTS].astype(np.float32)
        flat_out[start : start + _CHUNK_ELEMENTS] = (scale32 * chunk).astype(output)
    return out


def _scaled_blocks(
    codes: np.ndarray[Any, Any],
    scales: np.ndarray[Any, Any],
    block: tuple[int, ...],
    output: np.dtype[Any],
) -> np.ndarray[Any, Any]:
    """Each element times its block's scale, a band of whole block rows of dim 0 at a time."""
    shape = codes.shape
    out = np.empty(shape, output)
    row_elements = max(1, math.prod(shape[1:]))
    band = max(1, _CHUNK_ELEMENTS // (row_elements * block[0])) * block[0]
    for start in range(0, shape[0], band):
        stop = min(start + band, shape[0])
        grid = scales[start // block[0] : -(-stop // block[0])]
        for axis, extent in enumerate(block):
            grid = np.repeat(grid, extent, axis=axis)
        window = (slice(0, stop - start), *[slice(0, n) for n in shape[1:]])
        grid = grid[window]
        chunk = codes[start:stop].astype(np.float32)
        out[start:stop] = (grid * chunk).astype(output)
    return out


_WORDS: Final = {1: "U8", 2: "U16", 4: "U32"}
"""The unsigned dtype a stored element of that many bytes is read as, before it is decoded."""


class BurnPart(ValueRecord):
    """What a box of a QFloat tensor needs read (`plan_burn_part`): the smallest box around
    it whose every edge falls on a block and a packed word (or the tensor's end), in the
    coordinates of each stored part, and where those parts lie in the tensor's bytes.

    Attributes:
        codes_dtype: how the stored codes are read: ``"I8"``, or ``"U32"`` for packed words.
        codes_shape: the stored codes' grid, at the tensor's first byte: the logical shape
            with the packed dim counted in words (one byte per code otherwise).
        codes_box: ``(start, stop)`` per dim of `codes_shape` to read.
        scales_dtype: the unsigned dtype of the stored scales' width (decoded after reading).
        scales_at: the byte the scales start at, after the codes.
        scales_grid: the scales' grid: blocks per dim, or ``(1,)`` for one per-tensor scale.
        scales_box: ``(start, stop)`` per dim of `scales_grid` to read.
        global_at: the byte of a two-level scheme's per-tensor scale, else ``None``.
        enclosing: the logical box those codes decode to.
        keep: the slices that cut the asked-for box out of `enclosing`.
    """

    codes_dtype: str
    codes_shape: tuple[int, ...]
    codes_box: tuple[tuple[int, int], ...]
    scales_dtype: str
    scales_at: int
    scales_grid: tuple[int, ...]
    scales_box: tuple[tuple[int, int], ...]
    global_at: int | None
    enclosing: tuple[tuple[int, int], ...]
    keep: tuple[slice, ...]


def plan_burn_part(
    scheme: BurnQuantScheme, shape: tuple[int, ...], index: tuple[range, ...]
) -> BurnPart:
    """The reads that give the values `index` selects (one non-empty range per dim of a
    tensor of at least one dim, as `box_ranges` gives them), checked by `check_burn_qfloat`
    beforehand."""
    block = scheme.block_dims(len(shape)) if scheme.block is not None else (1,) * len(shape)
    packed = len(shape) - 1 - (scheme.packed_dim or 0) if scheme.num_quants > 1 else -1
    codes_shape = scheme.storage_shape(shape) if scheme.num_quants > 1 else shape
    codes_box, scales_box, enclosing, keep = [], [], [], []
    for axis, (size, kept) in enumerate(zip(shape, index, strict=True)):
        quants = scheme.num_quants if axis == packed else 1
        align = math.lcm(block[axis], quants)
        low, high = min(kept[0], kept[-1]), max(kept[0], kept[-1]) + 1
        low, high = low // align * align, min(-(-high // align) * align, size)
        codes_box.append((low // quants, -(-high // quants)))
        scales_box.append((low // block[axis], -(-high // block[axis])))
        enclosing.append((low, high))
        keep.append(range_slice(kept, low))
    scales_at, global_at, _ = _byte_regions(scheme, shape)
    return BurnPart(
        _WORDS[scheme.storage_bytes] if scheme.num_quants > 1 else "I8",
        codes_shape,
        tuple(codes_box),
        _WORDS[SCALE_SIZES[scheme.scale_dtype]],
        scales_at,
        scheme.scale_grid(shape),
        tuple(scales_box) if scheme.block is not None else ((0, 1),),
        global_at if scheme.global_scale is not None else None,
        tuple(enclosing),
        tuple(keep),
    )


def dequantize_burn_part(
    part: BurnPart,
    scheme: BurnQuantScheme,
    codes: np.ndarray[Any, Any],
    scales: memoryview,
    global_scale: memoryview | None,
    dtype: np.dtype[Any],
    *,
    path: str | None = None,
    tensor: str | None = None,
) -> np.ndarray[Any, Any]:
    """The values of `part`: `codes` (``int8``, or the ``uint32`` words, of its `codes_box`),
    `scales` (the stored bytes of its `scales_box`: the one per-tensor scale, or blocks) and a
    two-level scheme's `global_scale` bytes, dequantized exactly as `dequantize_burn_qfloat`
    dequantizes the whole tensor, then cut to the asked-for box.

    Raises:
        DescriptorError: a scale read is not finite.
    """
    extents = tuple(high - low for low, high in part.enclosing)
    if scheme.num_quants > 1:
        axis = len(extents) - 1 - (scheme.packed_dim or 0)
        codes = _unpack_along(codes, axis, extents[axis], scheme)
    decoded = _decode_scales(scales, scheme.scale_dtype)
    if global_scale is not None and scheme.global_scale is not None:
        decoded = (_decode_scales(global_scale, scheme.global_scale)[0] * decoded).astype(
            np.float32
        )
    if not np.isfinite(decoded).all():
        raise DescriptorError("QFloat scales are not all finite", path=path, tensor=tensor)
    if scheme.block is None:
        values = _scaled_flat(codes, decoded.reshape(-1)[0], extents, dtype)
    else:
        grid = decoded.reshape(tuple(high - low for low, high in part.scales_box))
        values = _scaled_blocks(codes, grid, scheme.block_dims(len(extents)), dtype)
    if part.keep == tuple(slice(0, extent, 1) for extent in extents):
        return values
    return np.ascontiguousarray(values[part.keep])
