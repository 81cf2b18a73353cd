"""The ggml dequantization kernels agree bit for bit with gguf-py 0.19, the reference, on
quantized data, on random bytes with sane scales, and on random bytes whose scales are inf or
NaN; and the chunked driver keeps that agreement across chunk edges and output dtypes."""

from __future__ import annotations

import warnings
from types import ModuleType

import ml_dtypes
import numpy as np
import pytest

from weightstore.errors import DTypeError, FormatError, InvalidOptionError
from weightstore.quantized import (
    GGML_TYPES_BY_NAME,
    KERNELS,
    _ggml_kernels,
    dequantize_blocks,
    dequantize_into,
)

SCALE_FIELDS: dict[str, list[int]] = {
    # byte offsets of each float16 scale in a block
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "TQ1_0": [52], "TQ2_0": [64], "MXFP4": [], "NVFP4": [],
}  # fmt: skip
GGUF_QUANTIZES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4"]
SPECIAL_F16 = np.array([0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x0000, 0x8000, 0x0001, 0x7BFF], "<u2")


@pytest.fixture
def quants() -> ModuleType:
    """gguf-py's quants module, the oracle (skips where it is not installed)."""
    return pytest.importorskip("gguf.quants")


def gguf_dequantize(quants: ModuleType, blocks: np.ndarray, name: str) -> np.ndarray:
    import gguf

    values: np.ndarray = quants.dequantize(blocks, gguf.GGMLQuantizationType[name])
    return values.reshape(blocks.shape[0], -1)


def same_bits(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Equal float32 bit patterns, any NaN matching any NaN."""
    assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape
    equal = ours.view(np.uint32) == theirs.view(np.uint32)
    return bool((equal | (np.isnan(ours) & np.isnan(theirs))).all())


def random_blocks(name: str, n: int, seed: int, *, sane_scales: bool) -> np.ndarray:
    """`n` blocks of random bytes; with `sane_scales`, every float16 scale a finite value of a
    weight's size, else raw, and then some blocks carry inf, NaN, zero and subnormal scales."""
    ggml = GGML_TYPES_BY_NAME[name]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (n, ggml.type_size), dtype=np.uint8)
    for at in SCALE_FIELDS[name]:
        if sane_scales:
            scales = (rng.standard_normal((n, 1)) * 0.02).astype("<f2")
        else:
            scales = blocks[:, at : at + 2].copy().view("<u2")
            scales[: len(SPECIAL_F16), 0] = SPECIAL_F16
            scales = scales.view("<f2")
        blocks[:, at : at + 2] = scales.view(np.uint8)
    every_byte = np.arange(256, dtype=np.uint8)
    if name == "MXFP4":
        blocks[: min(n, 256), 0] = every_byte[:n]  # every E8M0 exponent
    if name == "NVFP4":
        blocks[: min(n, 64), 0:4] = every_byte.reshape(64, 4)[:n]  # every UE4M3 scale
    return blocks


@pytest.mark.parametrize("name", sorted(SCALE_FIELDS))
@pytest.mark.parametrize("sane_scales", [True, False], ids=["finite-scales", "raw-scales"])
def test_random_blocks_match_gguf_py_bit_for_bit(
    quants: ModuleType, name: str, sane_scales: bool
) -> None:
    blocks = random_blocks(name, 700, seed=len(name), sane_scales=sane_scales)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the oracle warns on inf and NaN scales
        expected = gguf_dequantize(quants, blocks, name)
    assert same_bits(KERNELS[name](blocks), expected)


@pytest.mark.parametrize("name", GGUF_QUANTIZES)
def test_quantized_normal_data_matches_gguf_py_bit_for_bit(quants: ModuleType, name: str) -> None:
    import gguf

    ggml = GGML_TYPES_BY_NAME[name]
    values = np.random.default_rng(7).standard_normal((64, 4 * ggml.block_size), np.float32)
    blocks = quants.quantize(values, gguf.GGMLQuantizationType[name]).reshape(-1, ggml.type_size)
    assert same_bits(KERNELS[name](blocks), gguf_dequantize(quants, blocks, name))


@pytest.mark.parametrize("name", sorted(SCALE_FIELDS))
def test_chunk_edges_change_nothing(
    quants: ModuleType, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1,000 elements a chunk: several chunks, the last one partial, for every block size.
    monkeypatch.setattr(_ggml_kernels, "CHUNK_ELEMENTS", 1000)
    blocks = random_blocks(name, 77, seed=3, sane_scales=True)
    values = dequantize_blocks(blocks, GGML_TYPES_BY_NAME[name])
    expected = gguf_dequantize(quants, blocks, name).reshape(-1)
    assert same_bits(values, expected)


def test_q8_k_is_its_float32_scale_times_its_int8_codes() -> None:
    # gguf-py has no Q8_K dequantizer: ggml's is d * q in float32, the bsums unused.
    rng = np.random.default_rng(5)
    n = 300
    blocks = rng.integers(0, 256, (n, 292), dtype=np.uint8)
    d = rng.standard_normal(n).astype("<f4")
    d[:4] = [np.inf, np.nan, 0.0, -0.0]
    blocks[:, 0:4] = d.view(np.uint8).reshape(n, 4)
    codes = blocks[:, 4:260].view(np.int8).astype(np.float32)
    with np.errstate(all="ignore"):
        expected = (d[:, None] * codes).astype(np.float32)
    assert same_bits(KERNELS["Q8_K"](blocks), expected)


def test_non_finite_scales_warn_nothing() -> None:
    blocks = random_blocks("Q4_K", 40, seed=1, sane_scales=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = dequantize_blocks(blocks, GGML_TYPES_BY_NAME["Q4_K"])
    assert np.isnan(values).any()


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_shapes(name: str) -> None:
    ggml = GGML_TYPES_BY_NAME[name]
    blocks = np.zeros((3, ggml.type_size), dtype=np.uint8)
    values = KERNELS[name](blocks)
    assert values.shape == (3, ggml.block_size) and values.dtype == np.float32
    flat = dequantize_blocks(blocks.reshape(-1), ggml)
    assert flat.shape == (3 * ggml.block_size,) and flat.dtype == np.float32
    assert dequantize_blocks(np.zeros(0, np.uint8), ggml).shape == (0,)


def test_q8_0_values_by_hand() -> None:
    block = np.zeros(34, dtype=np.uint8)
    block[0:2] = np.array([0.5], "<f2").view(np.uint8)
    block[2:34] = np.arange(-16, 16, dtype=np.int8).view(np.uint8)
    values = dequantize_blocks(block, GGML_TYPES_BY_NAME["Q8_0"])
    assert values.tolist() == [0.5 * q for q in range(-16, 16)]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_narrow_dtypes_round_the_float32_values_to_nearest_even(
    dtype: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ggml_kernels, "CHUNK_ELEMENTS", 700)
    ggml = GGML_TYPES_BY_NAME["Q6_K"]
    blocks = random_blocks("Q6_K", 9, seed=2, sane_scales=True)
    wide = dequantize_blocks(blocks, ggml)
    narrow = dequantize_blocks(blocks, ggml, dtype)
    assert narrow.dtype == np.dtype(dtype) and narrow.shape == wide.shape
    assert np.array_equal(narrow.view(np.uint16), wide.astype(dtype).view(np.uint16))


def test_other_output_dtypes_are_refused() -> None:
    blocks = np.zeros((1, 34), np.uint8)
    with pytest.raises(DTypeError, match="float32, float16 or bfloat16"):
        dequantize_blocks(blocks, GGML_TYPES_BY_NAME["Q8_0"], np.float64)
    with pytest.raises(DTypeError, match="'no such dtype'"):
        dequantize_blocks(blocks, GGML_TYPES_BY_NAME["Q8_0"], "no such dtype")
    with pytest.raises(DTypeError):
        dequantize_into(blocks, GGML_TYPES_BY_NAME["Q8_0"], np.empty(32, np.int32))


def test_a_partial_block_is_a_format_error_naming_the_tensor() -> None:
    with pytest.raises(FormatError, match="35 bytes are not whole Q8_0 blocks") as caught:
        dequantize_blocks(np.zeros(35, np.uint8), GGML_TYPES_BY_NAME["Q8_0"], tensor="fc.w")
    assert caught.value.tensor == "fc.w"
    with pytest.raises(FormatError):
        KERNELS["Q4_K"](np.zeros((2, 143), np.uint8))


def test_blocks_must_be_bytes() -> None:
    with pytest.raises(DTypeError, match="uint8"):
        dequantize_blocks(np.zeros(17, np.int16), GGML_TYPES_BY_NAME["Q8_0"])


@pytest.mark.parametrize("name", ["F32", "BF16", "Q8_1", "IQ2_XXS", "Q1_0"])
def test_a_type_without_a_kernel_is_refused(name: str) -> None:
    ggml = GGML_TYPES_BY_NAME[name]
    with pytest.raises(DTypeError, match=f"no dequantization kernel for ggml type {name}"):
        dequantize_blocks(np.zeros(ggml.type_size, np.uint8), ggml)


def test_extra_kernels_cover_other_types_chunk_by_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ggml_kernels, "CHUNK_ELEMENTS", 512)
    ggml = GGML_TYPES_BY_NAME["IQ4_NL"]  # 32 elements in 18 bytes
    seen: list[int] = []

    def first_byte(blocks: np.ndarray) -> np.ndarray:
        seen.append(blocks.shape[0])
        return np.repeat(blocks[:, :1].astype(np.float32), ggml.block_size, axis=1)

    blocks = np.arange(40 * 18, dtype=np.uint32).astype(np.uint8).reshape(40, 18)
    values = dequantize_blocks(blocks, ggml, np.float16, extra={"IQ4_NL": first_byte})
    assert seen == [16, 16, 8]
    assert np.array_equal(values.reshape(40, 32)[:, 0], blocks[:, 0].astype(np.float16))


def test_dequantize_into_fills_the_callers_array() -> None:
    ggml = GGML_TYPES_BY_NAME["Q4_0"]
    blocks = random_blocks("Q4_0", 10, seed=4, sane_scales=True)
    out = np.full((10, 32), np.nan, np.float32)
    dequantize_into(blocks, ggml, out)
    assert same_bits(out, KERNELS["Q4_0"](blocks))


def test_dequantize_into_refuses_an_unusable_out() -> None:
    ggml = GGML_TYPES_BY_NAME["Q4_0"]
    blocks = np.zeros((2, 18), np.uint8)
    with pytest.raises(InvalidOptionError, match=r"64 elements .* not 63 elements"):
        dequantize_into(blocks, ggml, np.empty(63, np.float32))
    frozen = np.empty(64, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(InvalidOptionError, match="not read-only"):
        dequantize_into(blocks, ggml, frozen)
    with pytest.raises(InvalidOptionError, match="not C-contiguous"):
        dequantize_into(blocks, ggml, np.empty((64, 2), np.float32)[:, 0])


def test_the_kernel_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        KERNELS["Q4_0"] = KERNELS["Q8_0"]  # type: ignore[index]
    assert set(KERNELS) == set(SCALE_FIELDS) | {"Q8_K"}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", ["Q8_0", "Q4_K", "Q6_K"])
def test_memory_is_the_output_plus_one_chunk(name: str, dtype: type) -> None:
    import tracemalloc

    ggml = GGML_TYPES_BY_NAME[name]
    blocks = random_blocks(name, (1 << 22) // ggml.block_size, seed=6, sane_scales=True)
    output = (1 << 22) * np.dtype(dtype).itemsize
    tracemalloc.start()
    try:
        dequantize_blocks(blocks, ggml, dtype)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Whole-array NumPy would hold several float32 copies (64 MiB and more); a chunk's
    # temporaries are a few MiB at most.
    assert peak < output + (4 << 20), peak
