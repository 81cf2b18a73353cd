"""Burn QFloat tensors: files built by our writer from codes and scales packed here by Burn's
byte rules (written out independently below, one element at a time), read back byte-identical
and dequantized to what the rule gives element by element; Burn's own test vectors; bad input.
"""

from __future__ import annotations

import itertools
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import burnpack
from weightstore.burnpack import BurnpackReader
from weightstore.dtypes import from_name
from weightstore.entry import TensorEntry
from weightstore.errors import DescriptorError, DTypeError

FIXTURES = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "burn"

# -- the reference, written out element by element ----------------------------------------------


def scheme(
    value: str,
    store: Any = "Native",
    *,
    tensor: str | None = None,
    block: tuple[int, ...] | None = None,
    block_dtype: str = "F32",
    mode: str = "Symmetric",
) -> dict[str, Any]:
    """A QuantScheme map in Burn's field order, its block canonicalised as cubecl does."""
    size = None
    if block is not None:
        dims = list(itertools.dropwhile(lambda d: d == 1, block))
        size = {"size": {"storage": dims + [1] * (5 - len(dims)), "len": len(dims)},
                "dtype": block_dtype}  # fmt: skip
    return {"value": value, "store": store, "mode": mode, "tensor": tensor, "block": size}


BITS = {"Q8S": 8, "Q4S": 4, "Q2S": 2}


def pack_values(codes: np.ndarray[Any, Any], value: str, store: Any) -> bytes:
    """Codes as Burn stores them: a byte each, or PackedU32(d): 32/bits per little-endian word
    along dim d from the innermost, value i at bits i*bits, each line padded to whole words."""
    if store in ("Native",) or "PackedNative" in store:
        return b"".join(struct.pack("<b", int(c)) for c in codes.reshape(-1))
    bits = BITS[value]
    per_word = 32 // bits
    axis = codes.ndim - 1 - store["PackedU32"]
    moved = np.moveaxis(codes, axis, -1)
    words = np.zeros((*moved.shape[:-1], -(-moved.shape[-1] // per_word)), np.uint32)
    for index in np.ndindex(moved.shape):
        word, slot = divmod(index[-1], per_word)
        field = (int(moved[index]) & ((1 << bits) - 1)) << (slot * bits)
        words[(*index[:-1], word)] |= field
    stored = np.moveaxis(words, -1, axis)
    return b"".join(struct.pack("<I", int(w)) for w in stored.reshape(-1))


def pack_scales(scales: np.ndarray[Any, Any], dtype: str) -> bytes:
    if dtype == "F32":
        return np.asarray(scales, "<f4").tobytes()
    if dtype == "F16":
        return np.asarray(scales, "<f2").tobytes()
    if dtype == "BF16":  # scales chosen exact in bf16: the top half of the f32 bits
        return (np.asarray(scales, "<f4").view("<u4") >> 16).astype("<u2").tobytes()
    if dtype == "UE4M3":
        return bytes(E4M3_BYTES[float(s)] for s in np.asarray(scales).reshape(-1))
    raise AssertionError(dtype)


E4M3_BYTES = {0.5: 0x30, 0.25: 0x28, 0.125: 0x20, 1.0: 0x38, 2.0: 0x40, 0.75: 0x34}


def expected_values(
    codes: np.ndarray[Any, Any],
    scales: np.ndarray[Any, Any],
    block: tuple[int, ...] | None,
    global_scale: float | None = None,
) -> np.ndarray[Any, Any]:
    """x = scale * q in float32, each element's scale found by its block coordinates."""
    out = np.empty(codes.shape, np.float32)
    dims = (1,) * (codes.ndim - len(block or ())) + (block or ())
    for index in np.ndindex(codes.shape):
        if block is None:
            scale = np.float32(scales.reshape(-1)[0])
        else:
            scale = np.float32(scales[tuple(i // b for i, b in zip(index, dims, strict=True))])
            if global_scale is not None:
                scale = np.float32(np.float32(global_scale) * scale)
        out[index] = np.float32(scale * np.float32(int(codes[index])))
    return out


def build(
    codes: np.ndarray[Any, Any],
    quant: dict[str, Any],
    scales: np.ndarray[Any, Any],
    scale_dtype: str,
    global_scale: float | None = None,
) -> tuple[bytes, bytes]:
    """(the tensor's bytes, a burnpack file holding it as "q", written by our writer)."""
    data = pack_values(codes, quant["value"], quant["store"]) + pack_scales(scales, scale_dtype)
    if global_scale is not None:
        data += struct.pack("<f", global_scale)
    entry = TensorEntry(
        "q", from_name("QFLOAT"), codes.shape, data, nbytes=len(data), quant_scheme=quant
    )
    return data, burnpack.write_bytes([entry])


def random_codes(shape: tuple[int, ...], value: str, seed: int) -> np.ndarray[Any, Any]:
    limit = {"Q8S": 127, "Q4S": 7, "Q2S": 1}[value]
    return np.random.default_rng(seed).integers(-limit, limit + 1, shape).astype(np.int8)


def block_scales(shape: tuple[int, ...], block: tuple[int, ...], seed: int) -> Any:
    dims = (1,) * (len(shape) - len(block)) + block
    grid = tuple(-(-n // b) for n, b in zip(shape, dims, strict=True))
    choices = np.array([0.5, 0.25, 0.125, 1.0, 2.0, 0.75], np.float32)
    return np.random.default_rng(seed).choice(choices, grid)


# -- schemes, each against the element-by-element rule ---------------------------------------------

CASES = [
    # id, value, store, shape, block, scale dtype
    ("q8s-native-tensor", "Q8S", "Native", (2, 3), None, "F32"),
    ("q8s-u32-block", "Q8S", {"PackedU32": 0}, (3, 10), (4,), "F32"),
    ("q8s-packednative-block", "Q8S", {"PackedNative": 0}, (4, 6), (2, 3), "F16"),
    ("q4s-u32-tensor", "Q4S", {"PackedU32": 0}, (3, 11), None, "F32"),
    ("q4s-u32-block2d", "Q4S", {"PackedU32": 0}, (5, 9), (2, 4), "BF16"),
    ("q4s-native-block", "Q4S", "Native", (3, 8), (8,), "F16"),
    ("q4s-u32-dim1", "Q4S", {"PackedU32": 1}, (10, 3), (4,), "F32"),
    ("q2s-u32-tensor", "Q2S", {"PackedU32": 0}, (3, 17), None, "F16"),
    ("q2s-u32-block", "Q2S", {"PackedU32": 0}, (2, 40), (32,), "F32"),
    ("q2s-u32-rank3", "Q2S", {"PackedU32": 0}, (3, 2, 20), (2, 1, 16), "F32"),
    ("q8s-native-rank1", "Q8S", "Native", (7,), (3,), "UE4M3"),
]


@pytest.mark.parametrize(
    ("value", "store", "shape", "block", "scale_dtype"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_dequantizes_to_the_rule_and_round_trips(
    value: str, store: Any, shape: tuple[int, ...], block: Any, scale_dtype: str
) -> None:
    codes = random_codes(shape, value, seed=len(shape) * 31 + shape[-1])
    if block is None:
        scales = np.array([0.0625 if scale_dtype != "F32" else 0.03937008], np.float32)
        quant = scheme(value, store, tensor=scale_dtype if scale_dtype != "F32" else None)
    else:
        scales = block_scales(shape, block, seed=shape[0])
        quant = scheme(value, store, block=block, block_dtype=scale_dtype)
    data, file_bytes = build(codes, quant, scales, scale_dtype)

    pack = BurnpackReader.from_bytes(file_bytes)
    assert bytes(pack.get_bytes("q")) == data
    stored = pack.descriptor("q")
    again = TensorEntry("q", stored.dtype, shape, pack.get_bytes("q"), nbytes=len(data),
                        quant_scheme=stored.quant_scheme)  # fmt: skip
    assert burnpack.write_bytes([again]) == file_bytes

    expected = expected_values(codes, scales, block)
    got = pack.get_dequantized("q")
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_array_equal(got, expected)
    for name in ("F16", "BF16"):
        narrow = pack.get_dequantized("q", name)
        assert narrow.dtype == from_name(name).numpy
        np.testing.assert_array_equal(narrow, expected.astype(from_name(name).numpy))


def test_two_level_scales_multiply_into_the_block_scale() -> None:
    """Burn's two-level layout: UE4M3 block scales, then the f32 per-tensor scale, dense."""
    codes = random_codes((4, 8), "Q4S", seed=3)
    scales = block_scales((4, 8), (4,), seed=4)
    quant = scheme("Q4S", {"PackedU32": 0}, tensor="F32", block=(4,), block_dtype="UE4M3")
    data, file_bytes = build(codes, quant, scales, "UE4M3", global_scale=3.0)
    assert len(data) == 4 * 1 * 4 + 8 + 4  # words, one byte per block scale, the global
    pack = BurnpackReader.from_bytes(file_bytes)
    expected = expected_values(codes, scales, (4,), global_scale=3.0)
    np.testing.assert_array_equal(pack.get_dequantized("q"), expected)


def test_burns_own_vectors() -> None:
    """burn-std's tests: [-128, 2, -3, 127] packs to 2147287680; its Q4S arange words unpack
    to 0..7 in runs; QuantizedBytes' per-tensor example holds [0, 25, 51, 76, 102, 127]."""
    q8 = scheme("Q8S", {"PackedU32": 0})
    data = struct.pack("<I", 2147287680) + struct.pack("<f", 1.0)
    pack = BurnpackReader.from_bytes(burnpack.write_bytes([_entry(data, (4,), q8)]))
    assert pack.get_dequantized("q").tolist() == [-128.0, 2.0, -3.0, 127.0]

    words = [0, 286331136, 286331153, 572657937, 572662306, 857874978, 858993459, 858993459,
             1145324612, 1145324612, 1431655748, 1431655765, 1717982549, 1717986918, 2003199590,
             2004318071]  # fmt: skip
    runs = [10, 18, 18, 18, 18, 18, 18, 10]
    data = struct.pack("<16I", *words) + struct.pack("<f", 1.0)
    q4 = scheme("Q4S", {"PackedU32": 0})
    pack = BurnpackReader.from_bytes(burnpack.write_bytes([_entry(data, (128,), q4)]))
    assert pack.get_dequantized("q").tolist() == [
        float(v) for v, n in enumerate(runs) for _ in range(n)
    ]

    values = bytes(np.array([0, 25, 51, 76, 102, 127], np.int8))
    data = values + struct.pack("<f", 0.03937008)
    pack = BurnpackReader.from_bytes(burnpack.write_bytes([_entry(data, (2, 3), scheme("Q8S"))]))
    expected = np.float32(0.03937008) * np.array([[0, 25, 51], [76, 102, 127]], np.float32)
    np.testing.assert_array_equal(pack.get_dequantized("q"), expected)


def test_scheme_metadata_bytes_are_the_references() -> None:
    """The reference's CBOR for QFloat{Q8S, Native, Symmetric, None, None}."""
    data = bytes(6) + struct.pack("<f", 1.0)
    file_bytes = burnpack.write_bytes([_entry(data, (2, 3), scheme("Q8S"))])
    expected = (
        b"\xa1\x66QFloat\xa5\x65value\x63Q8S\x65store\x66Native\x64mode\x69Symmetric"
        b"\x66tensor\xf6\x65block\xf6"
    )
    assert expected in file_bytes


def test_descriptor_says_the_logical_dtype_and_scheme() -> None:
    quant = scheme("Q4S", {"PackedU32": 0}, block=(1, 32), block_dtype="F16")
    codes = random_codes((2, 32), "Q4S", seed=1)
    _, file_bytes = build(codes, quant, block_scales((2, 32), (32,), 1), "F16")
    pack = BurnpackReader.from_bytes(file_bytes)
    assert pack.descriptor("q").logical_dtype == from_name("F32")
    parsed = pack.quant_scheme("q")
    assert (parsed.value, parsed.store, parsed.packed_dim) == ("Q4S", "PackedU32", 0)
    assert (parsed.block, parsed.block_scale, parsed.tensor_scale) == ((32,), "F16", None)
    with pytest.raises(DTypeError, match="no NumPy form"):
        pack.get("q")  # unchanged: a QFloat tensor has no one stored dtype


def test_large_tensors_dequantize_band_by_band_to_the_rule() -> None:
    """Over a million elements, so the output is written in several bands; the expected values
    come from a gather by block coordinates, not the repeat the reader uses."""
    shape, block = (1030, 1100), (3, 32)
    codes = random_codes(shape, "Q8S", seed=7)
    scales = block_scales(shape, block, seed=8)
    quant = scheme("Q8S", block=block)
    _, file_bytes = build(codes, quant, scales, "F32")
    pack = BurnpackReader.from_bytes(file_bytes)
    rows, cols = np.arange(shape[0]) // 3, np.arange(shape[1]) // 32
    expected = scales[np.ix_(rows, cols)].astype(np.float32) * codes.astype(np.float32)
    np.testing.assert_array_equal(pack.get_dequantized("q"), expected)
    bf16 = pack.get_dequantized("q", "BF16")
    np.testing.assert_array_equal(bf16, expected.astype(from_name("BF16").numpy))

    flat = random_codes((1_200_001,), "Q8S", seed=9)
    _, file_bytes = build(flat, scheme("Q8S"), np.array([0.5], np.float32), "F32")
    values = BurnpackReader.from_bytes(file_bytes).get_dequantized("q")
    np.testing.assert_array_equal(values, np.float32(0.5) * flat.astype(np.float32))


def test_ue4m3_scales_decode_as_e4m3fn() -> None:
    """Every UE4M3 byte against ml_dtypes' float8_e4m3fn (cubecl's e4m3 is that format)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from weightstore.quantized._burn_qfloat import _e4m3_table

    reference = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(_e4m3_table(), reference)


def test_empty_tensor() -> None:
    data = struct.pack("<f", 1.0)
    pack = BurnpackReader.from_bytes(
        burnpack.write_bytes([_entry(data, (0, 4), scheme("Q4S", {"PackedU32": 0}))])
    )
    assert pack.get_dequantized("q").shape == (0, 4)


# -- bad input -------------------------------------------------------------------------------------


def _entry(data: bytes, shape: tuple[int, ...], quant: Any, name: str = "q") -> TensorEntry:
    return TensorEntry(name, from_name("QFLOAT"), shape, data, nbytes=len(data), quant_scheme=quant)


def _pack(data: bytes, shape: tuple[int, ...], quant: Any) -> BurnpackReader:
    return BurnpackReader.from_bytes(burnpack.write_bytes([_entry(data, shape, quant)]))


@pytest.mark.parametrize("delta", [-1, 1])
def test_length_that_is_not_the_schemes_is_refused(delta: int) -> None:
    quant = scheme("Q4S", {"PackedU32": 0}, block=(4,))
    # [3, 9]: 2 words a line (per-line padding, not ceil(27 / 8) = 4), 3x3 f32 scales
    need = 3 * 2 * 4 + 9 * 4
    pack = _pack(bytes(need + delta), (3, 9), quant)
    with pytest.raises(DescriptorError, match=f"{need + delta:,} bytes.*needs {need:,}") as err:
        pack.get_dequantized("q")
    assert err.value.tensor == "q"
    assert _pack(bytes(need), (3, 9), quant).get_dequantized("q").shape == (3, 9)


def test_huge_shape_is_refused_before_allocating() -> None:
    pack = _pack(bytes(8), (2**20, 2**20), scheme("Q8S"))  # would be 4 TiB of float32
    with pytest.raises(DescriptorError, match="needs 1,099,511,627,780"):
        pack.get_dequantized("q")


@pytest.mark.parametrize(
    ("quant", "match"),
    [
        ({"value": "Q8S"}, "lacks store, mode, tensor, block"),
        ({**scheme("Q8S"), "value": "Q9S"}, "value 'Q9S' is not a QuantValue"),
        ({**scheme("Q8S"), "store": {"PackedU32": -1}}, "is not a QuantStore"),
        ({**scheme("Q8S"), "store": "Packed"}, "is not a QuantStore"),
        ({**scheme("Q8S"), "mode": "Affine"}, "is not a QuantMode"),
        ({**scheme("Q8S"), "tensor": "F64"}, "is not a ScaleDtype"),
        ({**scheme("Q8S"), "block": {"size": {"storage": [4], "len": 1}, "dtype": "F32"}},
         "is not a BlockSize"),
        ({**scheme("Q8S"), "block": {"size": {"storage": [0, 1, 1, 1, 1], "len": 1},
                                     "dtype": "F32"}}, "is not a BlockSize"),
        ({**scheme("Q8S"), "block": {"size": {"storage": [4, 1, 1, 1, 1], "len": 1},
                                     "dtype": "F8"}}, "is not a ScaleDtype"),
        (scheme("Q8S", block=(2, 2, 2)), "block \\[2, 2, 2\\] has more dims"),
        (scheme("Q4S", {"PackedU32": 2}), "packed dim 2 .* outside shape"),
    ],
)  # fmt: skip
def test_malformed_schemes_are_refused(quant: dict[str, Any], match: str) -> None:
    pack = _pack(bytes(16), (2, 4), quant)
    with pytest.raises(DescriptorError, match=match) as err:
        pack.get_dequantized("q")
    assert err.value.tensor == "q"


@pytest.mark.parametrize(
    ("quant", "match"),
    [
        (scheme("E2M1", {"PackedNative": 0}), "E2M1 .* not dequantized"),
        (scheme("Q8S", mode="Lookup"), "Lookup"),
        (scheme("Q8S", block=(4,), block_dtype="UE8M0"), "UE8M0"),
    ],
)
def test_schemes_not_dequantized_say_so(quant: dict[str, Any], match: str) -> None:
    with pytest.raises(DTypeError, match=match):
        _pack(bytes(16), (2, 4), quant).get_dequantized("q")


def test_non_finite_scale_is_refused() -> None:
    data = bytes(8) + struct.pack("<f", math.inf)
    with pytest.raises(DescriptorError, match="not all finite"):
        _pack(data, (2, 4), scheme("Q8S")).get_dequantized("q")


def test_output_dtype_and_plain_tensor_are_refused() -> None:
    data = bytes(8) + struct.pack("<f", 1.0)
    plain = TensorEntry.from_array("w", np.zeros(3, np.float32))
    pack = BurnpackReader.from_bytes(burnpack.write_bytes([_entry(data, (2, 4), scheme("Q8S")),
                                                            plain]))  # fmt: skip
    with pytest.raises(DTypeError, match="not I8"):
        pack.get_dequantized("q", "I8")
    with pytest.raises(DTypeError, match="not QFloat"):
        pack.get_dequantized("w")
    assert pack.descriptor("w").logical_dtype == from_name("F32")


# -- real files ------------------------------------------------------------------------------------


def test_real_burn_files_with_qfloat_dequantize() -> None:
    """Every QFloat tensor in Burn's own .bpk files dequantizes; none of the current ones
    holds one, which the skip says."""
    if not FIXTURES.is_dir():
        pytest.skip(f"{FIXTURES} is absent (the shared fixtures live outside the project)")
    found = 0
    for path in sorted(FIXTURES.rglob("*.bpk")):
        with BurnpackReader.from_file(path) as pack:
            for name, descriptor in pack.descriptors.items():
                if descriptor.dtype.kind == "q":
                    found += 1
                    values = pack.get_dequantized(name)
                    assert values.shape == descriptor.shape
                    assert np.isfinite(values).all()
    if not found:
        pytest.skip("no Burn fixture holds a QFloat tensor")
