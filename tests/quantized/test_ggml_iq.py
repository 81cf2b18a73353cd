"""The IQ dequantization kernels against llama.cpp's gguf-py, bit for bit.

gguf-py cannot quantize IQ types, so the blocks are random bytes: every grid index, sign
pattern and scale nibble is as likely as any other, and the float16 scales are overwritten
with finite values (or, in one test, left raw and salted with inf, NaN, zeros and subnormals,
where both sides must still agree). A few hand-made blocks pin the layout without the oracle.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from tests._optional import need
from weightstore.errors import DescriptorError, DTypeError
from weightstore.quantized._ggml_iq import _CHUNK_ELEMENTS, IQ_KERNELS
from weightstore.quantized._ggml_iq_grids import grid
from weightstore.quantized._ggml_types import GGML_TYPES_BY_NAME

IQ_TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS")
IQ1_M_SCALES = slice(48, 56)  # the four u16s whose top nibbles make IQ1_M's float16 scale


@pytest.fixture(scope="module")
def gguf() -> ModuleType:
    return need("gguf")


def _set_scales(blocks: NDArray[np.uint8], name: str, halves: NDArray[np.float16]) -> None:
    """Write one float16 scale per block where type `name` keeps it."""
    bits = halves.view(np.uint16)
    if name != "IQ1_M":
        blocks[:, :2] = bits.astype("<u2").view(np.uint8).reshape(-1, 2)
        return
    packed = blocks[:, IQ1_M_SCALES].view("<u2")
    packed &= np.uint16(0x0FFF)
    for word in range(4):
        packed[:, word] |= ((bits >> (4 * word)) & 0xF) << 12


def _random_blocks(name: str, n_blocks: int, seed: int) -> NDArray[np.uint8]:
    rng = np.random.default_rng(seed)
    size = GGML_TYPES_BY_NAME[name].type_size
    blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    _set_scales(blocks, name, rng.uniform(-4, 4, n_blocks).astype(np.float16))
    return blocks


def _oracle(gguf: ModuleType, name: str, blocks: NDArray[np.uint8]) -> NDArray[np.float32]:
    with np.errstate(all="ignore"):
        found = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[name])
    return np.asarray(found, dtype=np.float32).reshape(blocks.shape[0], -1)


def _assert_same_bits(ours: NDArray[np.float32], theirs: NDArray[np.float32]) -> None:
    """Equal float32 bit patterns, except that any NaN matches any NaN."""
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    nan = np.isnan(ours)
    assert np.array_equal(nan, np.isnan(theirs))
    differ = np.flatnonzero(ours.view(np.uint32)[~nan] != theirs.view(np.uint32)[~nan])
    assert differ.size == 0, f"{differ.size} elements differ, first at {differ[:5]}"


def test_every_iq_type_has_a_kernel_in_a_read_only_mapping() -> None:
    assert sorted(IQ_KERNELS) == sorted(IQ_TYPES)
    with pytest.raises(TypeError):
        IQ_KERNELS["IQ4_NL"] = IQ_KERNELS["IQ4_XS"]  # type: ignore[index]


@pytest.mark.parametrize("n_blocks", [1, 7, 300])
@pytest.mark.parametrize("name", IQ_TYPES)
def test_bit_exact_with_gguf_py(gguf: ModuleType, name: str, n_blocks: int) -> None:
    blocks = _random_blocks(name, n_blocks, seed=n_blocks)
    ours = IQ_KERNELS[name](blocks)
    gtype = GGML_TYPES_BY_NAME[name]
    assert ours.shape == (n_blocks, gtype.block_size)
    _assert_same_bits(ours, _oracle(gguf, name, blocks))


@pytest.mark.parametrize("name", IQ_TYPES)
def test_bit_exact_across_chunks(gguf: ModuleType, name: str) -> None:
    """Over two chunks and a part, so every chunk boundary lands where it should."""
    n_blocks = 2 * _CHUNK_ELEMENTS // GGML_TYPES_BY_NAME[name].block_size + 5
    blocks = _random_blocks(name, n_blocks, seed=11)
    _assert_same_bits(IQ_KERNELS[name](blocks), _oracle(gguf, name, blocks))


@pytest.mark.parametrize("name", IQ_TYPES)
def test_raw_scales_agree_with_gguf_py_on_inf_nan_and_zero(gguf: ModuleType, name: str) -> None:
    rng = np.random.default_rng(5)
    size = GGML_TYPES_BY_NAME[name].type_size
    blocks = rng.integers(0, 256, (400, size), dtype=np.uint8)  # raw: some inf and NaN scales
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 6e-8, 65504.0], dtype=np.float16)
    scales = np.tile(special, 8)
    rows = blocks[: scales.size]
    _set_scales(rows, name, scales)
    ours = IQ_KERNELS[name](blocks)
    assert np.isnan(ours).any() and np.isinf(ours).any()
    _assert_same_bits(ours, _oracle(gguf, name, blocks))


@pytest.mark.parametrize("name", ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S"])
def test_grids_decode_to_gguf_pys_tables(gguf: ModuleType, name: str) -> None:
    oracle = getattr(gguf.quants, name)
    oracle.init_grid()
    assert np.array_equal(grid(name), oracle.grid.reshape(oracle.grid_shape))
    assert not grid(name).flags.writeable


@pytest.mark.parametrize("name", IQ_TYPES)
def test_no_blocks_give_an_empty_result(name: str) -> None:
    gtype = GGML_TYPES_BY_NAME[name]
    out = IQ_KERNELS[name](np.zeros((0, gtype.type_size), dtype=np.uint8))
    assert out.shape == (0, gtype.block_size) and out.dtype == np.float32


@pytest.mark.parametrize("name", IQ_TYPES)
def test_a_strided_input_gives_the_contiguous_result(name: str) -> None:
    blocks = _random_blocks(name, 20, seed=3)
    every_other = np.concatenate([blocks, blocks], axis=1)[:, : blocks.shape[1]]
    assert not every_other.flags.c_contiguous
    assert np.array_equal(IQ_KERNELS[name](every_other), IQ_KERNELS[name](blocks))


@pytest.mark.parametrize("name", IQ_TYPES)
def test_the_result_is_the_callers_to_change(name: str) -> None:
    """Writing into one result must not reach the cached tables behind the next one."""
    blocks = _random_blocks(name, 3, seed=4)
    first = IQ_KERNELS[name](blocks)
    expected = first.copy()
    first[...] = 7.0
    assert np.array_equal(IQ_KERNELS[name](blocks), expected)


WRONG_SHAPES = {
    "a byte short": lambda size: (2, size - 1),
    "a byte over": lambda size: (2, size + 1),
    "flat": lambda size: (4 * size,),
    "three axes": lambda size: (1, 2, size),
}


@pytest.mark.parametrize("name", IQ_TYPES)
@pytest.mark.parametrize("shape_of", WRONG_SHAPES.values(), ids=WRONG_SHAPES)
def test_a_wrong_shape_is_a_descriptor_error(
    name: str, shape_of: Callable[[int], tuple[int, ...]]
) -> None:
    size = GGML_TYPES_BY_NAME[name].type_size
    with pytest.raises(DescriptorError, match=rf"{name} blocks must have shape \(n, {size}\)"):
        IQ_KERNELS[name](np.zeros(shape_of(size), dtype=np.uint8))


@pytest.mark.parametrize("name", IQ_TYPES)
@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.uint16])
def test_a_wrong_dtype_is_a_dtype_error(name: str, dtype: type[np.generic]) -> None:
    size = GGML_TYPES_BY_NAME[name].type_size
    with pytest.raises(DTypeError, match="must be uint8"):
        IQ_KERNELS[name](np.zeros((1, size), dtype=dtype))


def test_a_list_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match="must be uint8, got list"):
        IQ_KERNELS["IQ4_NL"]([0] * 18)  # type: ignore[arg-type]


def _blocks_of(*fields: Any) -> NDArray[np.uint8]:
    return np.frombuffer(b"".join(bytes(f) for f in fields), dtype=np.uint8).reshape(1, -1)


ONE = np.float16(1.0).tobytes()


def test_iq4_nl_layout_by_hand() -> None:
    """Low nibbles are elements 0-15, high nibbles 16-31, each a level of ggml's table."""
    levels = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
    codes = bytes(range(0, 256, 17))[:16]  # byte j = j | j << 4
    out = IQ_KERNELS["IQ4_NL"](_blocks_of(np.float16(-0.5).tobytes(), codes))
    assert out.tolist() == [[-0.5 * levels[j] for j in range(16)] * 2]


def test_iq2_xxs_sign_parity_by_hand() -> None:
    """Grid row 0 is eight 8s; scale 0 makes d/8; sign index 1 negates element 0 and, for
    even parity, element 7. Index 3 negates elements 0 and 1 only."""
    sub_block = bytes(4) + (1 | 3 << 7 | 15 << 28).to_bytes(4, "little")
    out = IQ_KERNELS["IQ2_XXS"](_blocks_of(ONE, sub_block * 8)).reshape(8, 4, 8)
    scale = 15.5 / 4  # (0.5 + 15) / 4
    assert out[:, 0].tolist() == [[-8 * scale] + [8 * scale] * 6 + [-8 * scale]] * 8
    assert out[:, 1].tolist() == [[-8 * scale] * 2 + [8 * scale] * 6] * 8
    assert out[:, 2:].tolist() == [[[8 * scale] * 8] * 2] * 8


def test_iq1_m_delta_sign_and_split_scale_by_hand() -> None:
    """IQ1_M's float16 scale lives in the top nibbles of its scale words, and bit 3 of a qh
    nibble turns the +1/8 shift of grid row 0 (eight -1s) into -1/8."""
    d_bits = int(np.float16(2.0).view(np.uint16))
    words = [((d_bits >> (4 * i)) & 0xF) << 12 for i in range(4)]  # every 3-bit scale 0
    scales = b"".join(w.to_bytes(2, "little") for w in words)
    qh = bytes([0x80] * 16)  # even groups +1/8, odd groups -1/8
    out = IQ_KERNELS["IQ1_M"](_blocks_of(bytes(32), qh, scales)).reshape(32, 8)
    assert out[0::2].tolist() == [[2 * (-1 + 0.125)] * 8] * 16
    assert out[1::2].tolist() == [[2 * (-1 - 0.125)] * 8] * 16


def test_importing_the_kernels_decodes_no_table_and_loads_no_numpy() -> None:
    code = (
        "import sys, weightstore.quantized._ggml_iq as k\n"
        "from weightstore.quantized._ggml_iq_grids import grid\n"
        "print('numpy' in sys.modules, grid.cache_info().currsize)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "0"]
