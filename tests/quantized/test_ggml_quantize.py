"""Q8_0 and Q4_0 quantization agrees byte for byte with gguf-py 0.19 (ggml's reference
quantizers), including its rounding of ties, zero and all-equal blocks, a negative extreme, and
blocks too small for a float32 reciprocal; non-finite input and partial blocks are refused."""

from __future__ import annotations

from types import ModuleType

import ml_dtypes
import numpy as np
import pytest

from weightstore.errors import QuantizeError
from weightstore.quantized import (
    GGML_TYPES_BY_NAME,
    QUANTIZABLE,
    _ggml_quantize,
    dequantize_blocks,
    quantize_blocks,
)

RNG = np.random.default_rng(11)
NAMES = sorted(QUANTIZABLE)


def _tied_extremes() -> np.ndarray:
    # +3 then -3 and the reverse: Q4_0 takes the first element of largest magnitude.
    block = RNG.uniform(-1, 1, (2, 32)).astype(np.float32)
    block[0, [3, 9]] = [3.0, -3.0]
    block[1, [3, 9]] = [-3.0, 3.0]
    return block


CASES: dict[str, np.ndarray] = {
    "normal": RNG.standard_normal((300, 64), np.float32),
    # halves of integers with max 127: Q8_0's scale is exactly 1, so every .5 is a tie
    "ties": np.concatenate([np.arange(-254, 255) / 2, [127.0] * 3]).astype(np.float32),
    "plus-minus": np.tile(np.array([1.0, -1.0], np.float32), 32),
    "zeros": np.zeros(64, np.float32),
    "negative-zeros": -np.zeros(64, np.float32),
    "all-equal": np.full(64, 0.37, np.float32),
    "all-equal-negative": np.full(64, -2.5, np.float32),
    "negative-extreme": np.where(np.arange(32) == 5, -3.0, RNG.uniform(-1, 1, 32)),
    "tied-extremes": _tied_extremes(),
    # max|x| from 1e-45 to 1e-30: 1/d overflows float32 in the smallest blocks
    "tiny": RNG.standard_normal((64, 32)) * np.logspace(-45, -30, 64)[:, None],
    "huge": (RNG.standard_normal((64, 32)) * np.logspace(30, 38, 64)[:, None]).clip(-3e38, 3e38),
    "float64": RNG.standard_normal((8, 64)),
    "float16": RNG.standard_normal((8, 64)).astype(np.float16),
    "bfloat16": RNG.standard_normal((8, 64)).astype(ml_dtypes.bfloat16),
}


@pytest.fixture
def quants() -> ModuleType:
    """gguf-py's quants module, the oracle (skips where it is not installed)."""
    return pytest.importorskip("gguf.quants")


def gguf_quantize(quants: ModuleType, values: np.ndarray, name: str) -> np.ndarray:
    import gguf

    wide = values.astype(np.float32).reshape(-1, 32)
    with np.errstate(all="ignore"):
        blocks: np.ndarray = quants.quantize(wide, gguf.GGMLQuantizationType[name])
    return blocks.reshape(-1, GGML_TYPES_BY_NAME[name].type_size)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_blocks_match_gguf_py_byte_for_byte(quants: ModuleType, name: str, case: str) -> None:
    values = CASES[case]
    blocks = quantize_blocks(values, GGML_TYPES_BY_NAME[name])
    assert blocks.dtype == np.uint8 and blocks.shape == (
        values.size // 32,
        1 + 1 + 16 * (2 if name == "Q8_0" else 1),
    )
    assert np.array_equal(blocks, gguf_quantize(quants, values, name))


@pytest.mark.parametrize("name", NAMES)
def test_chunks_change_nothing(
    quants: ModuleType, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ggml_quantize, "_CHUNK_BLOCKS", 7)
    values = RNG.standard_normal(32 * 50, np.float32)
    assert np.array_equal(
        quantize_blocks(values, GGML_TYPES_BY_NAME[name]), gguf_quantize(quants, values, name)
    )


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_is_within_half_a_step(name: str) -> None:
    ggml = GGML_TYPES_BY_NAME[name]
    values = RNG.standard_normal((40, 32), np.float32)
    back = dequantize_blocks(quantize_blocks(values, ggml), ggml).reshape(40, 32)
    largest = np.abs(values).max(axis=1, keepdims=True)
    step = largest / (127 if name == "Q8_0" else 8)
    # Half a step, plus float16's rounding of the scale times the largest code; Q4_0's codes
    # reach -8 steps on the side of the extreme but only +7 on the other, a whole step short.
    allowed = step * (0.5 if name == "Q8_0" else 1.0) + largest * 2e-3
    assert (np.abs(back - values) <= allowed).all()


def test_round_trip_of_exact_codes_is_exact() -> None:
    ggml = GGML_TYPES_BY_NAME["Q8_0"]
    codes = RNG.integers(-127, 128, (20, 32))
    codes[:, 7] = 127  # every block's scale is 127/4 / 127 = 1/4, exact in float16
    values = (codes / 4).astype(np.float32)
    back = dequantize_blocks(quantize_blocks(values, ggml), ggml)
    assert np.array_equal(back, values.reshape(-1))


@pytest.mark.parametrize("name", NAMES)
def test_blocks_too_small_for_a_reciprocal_are_zero_codes(name: str) -> None:
    values = np.full(32, 1e-39, np.float32)
    values[::2] *= -1
    block = quantize_blocks(values, GGML_TYPES_BY_NAME[name])
    assert np.count_nonzero(block[0, 2:]) == 0
    assert not np.any(block[0, :2] & 0x7F) and block[0, 1] & 0x7F == 0  # d is +-0 in float16
    assert np.array_equal(dequantize_blocks(block, GGML_TYPES_BY_NAME[name]), np.zeros(32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", NAMES)
def test_non_finite_values_are_refused_with_their_index(name: str, bad: float) -> None:
    values = np.ones(96, np.float32)
    values[70] = bad
    with pytest.raises(QuantizeError, match="value 70 is") as caught:
        quantize_blocks(values, GGML_TYPES_BY_NAME[name], tensor="fc.w")
    assert caught.value.tensor == "fc.w"
    assert isinstance(caught.value, ValueError)


def test_a_partial_block_is_refused() -> None:
    with pytest.raises(QuantizeError, match="33 values are not whole Q8_0 blocks"):
        quantize_blocks(np.ones(33, np.float32), GGML_TYPES_BY_NAME["Q8_0"])


def test_only_q8_0_and_q4_0_quantize() -> None:
    assert frozenset({"Q8_0", "Q4_0"}) == QUANTIZABLE
    with pytest.raises(QuantizeError, match="cannot quantize to Q4_K"):
        quantize_blocks(np.ones(256, np.float32), GGML_TYPES_BY_NAME["Q4_K"])
    with pytest.raises(QuantizeError, match="cannot quantize bool"):
        quantize_blocks(np.ones(32, bool), GGML_TYPES_BY_NAME["Q8_0"])


def test_memory_is_the_output_plus_one_chunk() -> None:
    import tracemalloc

    values = RNG.standard_normal(1 << 22, np.float32)
    tracemalloc.start()
    try:
        blocks = quantize_blocks(values, GGML_TYPES_BY_NAME["Q8_0"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < blocks.nbytes + (8 << 20), peak
