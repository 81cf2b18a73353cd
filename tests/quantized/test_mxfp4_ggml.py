"""gpt-oss's MXFP4 pair repacked as ggml MXFP4 blocks: gguf-py (0.19) dequantizes the repacked
bytes to exactly our SafeTensors-side values, but for one documented bit (the sign of E2M1's
negative zero, which ggml's int8 value table drops); the repacking is lossless both ways, a
GGUF file carries the blocks through gguf-py's and our readers, and bad inputs are refused
with typed errors before anything is allocated."""

from __future__ import annotations

import doctest
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from weightstore.dtypes import from_name
from weightstore.entry import TensorEntry
from weightstore.errors import DescriptorError, DTypeError, QuantizedLayoutError
from weightstore.gguf import GgufReader, GgufWriter
from weightstore.quantized import (
    GGML_TYPES_BY_NAME,
    _mxfp4_ggml,
    dequantize_blocks,
    ggml_to_mxfp4,
    mxfp4_to_ggml,
)
from weightstore.quantized._hf_mxfp4 import dequantize_mxfp4

RNG = np.random.default_rng(39)
SPECIAL_SCALES = (0, 1, 2, 126, 127, 128, 253, 254, 255)  # subnormal halves, 1.0, overflow
NEGATIVE_ZERO_CODE = 8  # E2M1 0b1000: -0.0 in the OCP table; ggml's int8 table has 0 there


def _gguf() -> ModuleType:
    module: ModuleType = pytest.importorskip("gguf", reason="gguf-py is the oracle here")
    return module


def _pair(*leading: int, groups: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Random blocks and scales, the first scales the special bytes (as many as fit)."""
    blocks = RNG.integers(0, 256, (*leading, groups, 16), dtype=np.uint8)
    scales = RNG.integers(0, 256, (*leading, groups), dtype=np.uint8)
    flat = scales.reshape(-1)
    count = min(flat.size, len(SPECIAL_SCALES))
    flat[:count] = SPECIAL_SCALES[:count]
    return blocks, scales


def _codes(blocks: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each element's 4-bit code, in logical order (low nibble first)."""
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1)
    return codes.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)


def _bits(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(values, np.float32).view(np.uint32)


def _ggml_sign_of_zero(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`values` with -0.0 made +0.0: what ggml's value table gives for the negative-zero code."""
    return np.where(values == 0, np.float32(0), values).astype(np.float32)


# -- the byte mapping -------------------------------------------------------------------------

# One block, element i holding code i % 16, scale byte 0x7f (1.0):
MXFP4_BLOCKS = bytes.fromhex(
    "10 32 54 76 98 ba dc fe"  # bytes 0-7: c[2k] low, c[2k+1] high (elements 0-15)
    "10 32 54 76 98 ba dc fe"  # bytes 8-15: elements 16-31
)
GGML_BLOCK = bytes.fromhex(
    "7f"  # the E8M0 byte, as it is
    "00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff"  # byte j: c[j] low, c[j + 16] high
)


def test_one_block_is_byte_exact() -> None:
    blocks = np.frombuffer(MXFP4_BLOCKS, np.uint8).reshape(1, 16)
    raw = mxfp4_to_ggml(blocks, np.array([0x7F], np.uint8))
    assert raw.shape == (17,) and raw.tobytes().hex(" ") == GGML_BLOCK.hex(" ")
    back, scales = ggml_to_mxfp4(raw, (32,))
    assert back.tobytes().hex(" ") == MXFP4_BLOCKS.hex(" ") and scales.tolist() == [0x7F]


def test_element_order_follows_both_layouts() -> None:
    """Distinct codes in the first and second halves land where each layout says."""
    codes = np.zeros(32, np.uint8)
    codes[3], codes[16], codes[31] = 5, 9, 15
    blocks = (codes[0::2] | codes[1::2] << 4).reshape(1, 16)
    raw = mxfp4_to_ggml(blocks, np.array([127], np.uint8))
    qs = raw[1:]
    assert [qs[j] & 0x0F for j in range(16)] == codes[:16].tolist()
    assert [qs[j] >> 4 for j in range(16)] == codes[16:].tolist()


def test_docstring_example_runs() -> None:
    assert doctest.testmod(_mxfp4_ggml, raise_on_error=True).attempted > 0


# -- gguf-py as the oracle ----------------------------------------------------------------------


def _oracle_values(raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    gguf = _gguf()
    with np.errstate(over="ignore"):  # scale bytes 254 and 255 overflow; the values say so
        values: np.ndarray[Any, Any] = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.MXFP4)
    return values


@pytest.mark.parametrize("shape", [(5, 3), (2, 7, 4), (2, 3, 2, 1)])
def test_gguf_py_reads_the_repacked_blocks_as_our_values(shape: tuple[int, ...]) -> None:
    """Bit for bit, infinities included, except the sign of the negative-zero code."""
    blocks, scales = _pair(*shape[:-1], groups=shape[-1])
    raw = mxfp4_to_ggml(blocks, scales)
    theirs, ours = _oracle_values(raw), dequantize_mxfp4(blocks, scales)
    assert theirs.shape == ours.shape == (*shape[:-1], shape[-1] * 32)
    assert np.array_equal(_bits(theirs), _bits(_ggml_sign_of_zero(ours)))
    assert not np.isnan(theirs).any() and np.isinf(theirs).any()  # 254 and 255 overflow


def test_every_byte_under_every_scale_byte() -> None:
    """All 65,536 (code byte, scale byte) pairs, each byte in every one of the 16 positions,
    so every nibble value lands on every element of a block."""
    positions = (np.arange(256)[:, None] + np.arange(16)[None, :]) % 256  # [256, 16]
    blocks = np.broadcast_to(positions.astype(np.uint8), (256, 256, 16)).copy()
    scales = np.broadcast_to(np.arange(256, dtype=np.uint8)[:, None], (256, 256)).copy()
    raw = mxfp4_to_ggml(blocks, scales)
    theirs, ours = _oracle_values(raw), dequantize_mxfp4(blocks, scales)
    assert np.array_equal(_bits(theirs), _bits(_ggml_sign_of_zero(ours)))
    # and our own ggml kernel, which follows gguf-py, reads the same bits
    mine = dequantize_blocks(raw, GGML_TYPES_BY_NAME["MXFP4"]).reshape(theirs.shape)
    assert np.array_equal(_bits(mine), _bits(theirs))


def test_the_one_disagreement_is_the_sign_of_negative_zero() -> None:
    """Code 8 (E2M1's -0.0) is -0.0 on the SafeTensors side, as transformers computes it, and
    +0.0 in ggml, whose value table is int8; every other bit agrees, under every scale byte.
    The bytes are the same: only the decoders' tables differ."""
    blocks, scales = _pair(256, groups=4)
    scales[:, 0] = np.arange(256)
    raw = mxfp4_to_ggml(blocks, scales)
    theirs, ours = _bits(_oracle_values(raw)), _bits(dequantize_mxfp4(blocks, scales))
    differ = theirs != ours
    negative_zero = _codes(blocks) == NEGATIVE_ZERO_CODE
    assert negative_zero.any() and np.array_equal(differ, negative_zero)
    assert (ours[differ] == 0x8000_0000).all() and (theirs[differ] == 0).all()


def test_gguf_py_quantized_blocks_repack_to_its_values() -> None:
    """The other way: blocks gguf-py's quantizer wrote, repacked as gpt-oss's pair, give
    gguf-py's values (its quantizer never picks code 8, so every bit agrees)."""
    gguf = _gguf()
    values = RNG.standard_normal((6, 128)).astype(np.float32) * np.logspace(-3, 3, 6)[:, None]
    raw = gguf.quants.quantize(values.astype(np.float32), gguf.GGMLQuantizationType.MXFP4)
    blocks, scales = ggml_to_mxfp4(raw, values.shape)
    assert blocks.shape == (6, 4, 16) and scales.shape == (6, 4)
    assert np.array_equal(_bits(dequantize_mxfp4(blocks, scales)), _bits(_oracle_values(raw)))
    assert np.array_equal(mxfp4_to_ggml(blocks, scales), raw)


# -- lossless both ways -----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1), (9, 1), (4, 90), (2, 3, 5), (2, 2, 3, 4)])
def test_round_trip_is_byte_identical(shape: tuple[int, ...]) -> None:
    blocks, scales = _pair(*shape[:-1], groups=shape[-1])
    raw = mxfp4_to_ggml(blocks, scales)
    assert raw.dtype == np.uint8 and raw.shape == (*shape[:-1], shape[-1] * 17)
    back_blocks, back_scales = ggml_to_mxfp4(raw, (*shape[:-1], shape[-1] * 32))
    assert back_blocks.tobytes() == blocks.tobytes() and back_blocks.shape == blocks.shape
    assert back_scales.tobytes() == scales.tobytes() and back_scales.shape == scales.shape
    flat_blocks, flat_scales = ggml_to_mxfp4(raw.reshape(-1), (*shape[:-1], shape[-1] * 32))
    assert np.array_equal(flat_blocks, blocks) and np.array_equal(flat_scales, scales)


def test_ggml_bytes_survive_the_other_round_trip() -> None:
    """Any 17-byte blocks (random scale bytes included) come back as they were."""
    raw = RNG.integers(0, 256, (3, 11 * 17), dtype=np.uint8)
    assert mxfp4_to_ggml(*ggml_to_mxfp4(raw, (3, 11 * 32))).tobytes() == raw.tobytes()


def test_chunk_edges_and_strided_inputs() -> None:
    """More blocks than a chunk holds, not a multiple of it, handed in as strided views."""
    rows = _mxfp4_ggml.ROWS_PER_CHUNK + 1234
    wide, scales_wide = _pair(2, rows, groups=2)
    blocks, scales = wide[:, :, 1], scales_wide[:, :, 1]  # [2, rows, 16] and [2, rows], strided
    blocks, scales = blocks[:, :, None], scales[:, :, None]  # G = 1
    assert not blocks.flags.c_contiguous
    raw = mxfp4_to_ggml(blocks, scales)
    expected = mxfp4_to_ggml(np.ascontiguousarray(blocks), np.ascontiguousarray(scales))
    assert np.array_equal(raw, expected)
    padded = np.zeros((2, rows, 34), np.uint8)
    padded[..., :17] = raw
    back, back_scales = ggml_to_mxfp4(padded[..., :17], (2, rows, 32))  # strided too
    assert np.array_equal(back, blocks) and np.array_equal(back_scales, scales)


def test_blocks_whose_bytes_are_not_adjacent() -> None:
    """Every other byte of a wider array: each chunk is copied before it is read as words."""
    wide = RNG.integers(0, 256, (3, 5, 32), dtype=np.uint8)
    scales = RNG.integers(0, 256, (3,), dtype=np.uint8).repeat(5).reshape(3, 5)
    blocks = wide[..., ::2]
    raw = mxfp4_to_ggml(blocks, scales)
    assert np.array_equal(raw, mxfp4_to_ggml(np.ascontiguousarray(blocks), scales))


def test_empty_tensors() -> None:
    raw = mxfp4_to_ggml(np.zeros((0, 3, 16), np.uint8), np.zeros((0, 3), np.uint8))
    assert raw.shape == (0, 51)
    blocks, scales = ggml_to_mxfp4(raw, (0, 96))
    assert blocks.shape == (0, 3, 16) and scales.shape == (0, 3)


def test_memory_is_the_output_plus_one_chunk() -> None:
    """12 MiB of blocks repack each way with a peak of the output plus one chunk's 2 MiB of
    scratch words: no whole-tensor temporaries."""
    import tracemalloc

    blocks = np.zeros((4, 196_608, 16), np.uint8)
    scales = np.zeros((4, 196_608), np.uint8)
    tracemalloc.start()
    try:
        raw = mxfp4_to_ggml(blocks, scales)
        _, forward_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        ggml_to_mxfp4(raw, (4, 196_608 * 32))
        _, backward_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    chunk = 4 * 8 * _mxfp4_ggml.ROWS_PER_CHUNK + (1 << 20)  # four scratch words a block, slack
    assert forward_peak < raw.nbytes + chunk, forward_peak
    assert backward_peak - start < blocks.nbytes + scales.nbytes + chunk, backward_peak


# -- through a GGUF file -----------------------------------------------------------------------


def test_a_gguf_file_keeps_the_blocks(tmp_path: Path) -> None:
    """gpt-oss's experts ``[experts, rows, G * 32]`` written as MXFP4 blocks: gguf-py and our
    reader see the type, the dims and the values; the raw bytes repack to the original pair."""
    gguf = _gguf()
    blocks, scales = _pair(3, 8, groups=4)
    logical = (3, 8, 128)
    raw = mxfp4_to_ggml(blocks, scales)
    entry = TensorEntry(
        "blk.0.ffn_down_exps.weight", from_name("F32"), logical, b"", nbytes=0,
        blocks=("MXFP4", lambda: raw),
    )  # fmt: skip
    path = tmp_path / "experts.gguf"
    GgufWriter([entry], {"general.architecture": "gpt-oss"}).save(path)
    ours = dequantize_mxfp4(blocks, scales)

    oracle = gguf.GGUFReader(str(path)).tensors[0]
    assert oracle.tensor_type == gguf.GGMLQuantizationType.MXFP4
    assert [int(dim) for dim in oracle.shape] == list(reversed(logical))  # ne0 is innermost
    assert np.array_equal(np.asarray(oracle.data).reshape(raw.shape), raw)
    theirs = _oracle_values(np.asarray(oracle.data)).reshape(logical)
    assert np.array_equal(_bits(theirs), _bits(_ggml_sign_of_zero(ours)))

    with GgufReader.from_file(path) as reader:
        assert reader.ggml_type(entry.name).name == "MXFP4"
        values = reader.get(entry.name)
        assert values.shape == logical
        assert np.array_equal(_bits(values), _bits(_ggml_sign_of_zero(ours)))
        back_blocks, back_scales = ggml_to_mxfp4(reader.get_raw(entry.name), logical)
    assert np.array_equal(back_blocks, blocks) and np.array_equal(back_scales, scales)


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("blocks", "scales", "words"),
    [
        (np.zeros((2, 3, 16), np.int8), np.zeros((2, 3), np.uint8), "blocks are I8"),
        (np.zeros((2, 3, 8), np.uint8), np.zeros((2, 3), np.uint8), "U8 [..., G, 16]"),
        (np.zeros(16, np.uint8), np.zeros(1, np.uint8), "U8 [..., G, 16]"),
        (np.zeros((2, 3, 16), np.uint8), np.zeros((2, 3), np.float32), "scales are F32"),
        (np.zeros((2, 3, 16), np.uint8), np.zeros((2, 4), np.uint8), "need [2, 3]"),
    ],
)
def test_bad_pairs_are_refused_naming_both_tensors(
    blocks: np.ndarray[Any, Any], scales: np.ndarray[Any, Any], words: str
) -> None:
    with pytest.raises(QuantizedLayoutError) as caught:
        mxfp4_to_ggml(
            blocks, scales, group="e.down", blocks_name="e.down_blocks",
            scales_name="e.down_scales", path="model.safetensors",
        )  # fmt: skip
    error = caught.value
    assert words in error.detail, error.detail
    assert (error.group, error.codes) == ("e.down", "e.down_blocks")
    assert error.companion == "e.down_scales"
    assert error.path == "model.safetensors" and error.tensor == "e.down"
    assert str(error).startswith("model.safetensors, tensor 'e.down': ")


def test_a_pair_that_is_not_arrays_is_refused() -> None:
    not_an_array: Any = bytes(16)
    with pytest.raises(DTypeError) as caught:
        mxfp4_to_ggml(not_an_array, np.zeros(1, np.uint8), group="e.down", blocks_name="e.b")
    assert caught.value.tensor == "e.down"
    assert caught.value.detail == "MXFP4 'e.b' must be a uint8 array, not bytes"


@pytest.mark.parametrize(
    "raw", [np.zeros((2, 17), np.int8), np.zeros((2, 17), np.float32), b"\x00" * 34]
)
def test_raw_blocks_that_are_not_uint8_are_refused(raw: Any) -> None:
    with pytest.raises(DTypeError) as caught:
        ggml_to_mxfp4(raw, (2, 32), tensor="blk.0.ffn_down_exps.weight", path="m.gguf")
    assert caught.value.tensor == "blk.0.ffn_down_exps.weight" and caught.value.path == "m.gguf"
    assert "uint8 array" in caught.value.detail


@pytest.mark.parametrize(
    ("raw_shape", "logical", "words"),
    [
        ((2, 17), (2, 33), "whole 32-element blocks"),
        ((2, 17), (), "logical shape []"),
        ((2, 17), (-2, 32), "logical shape [-2, 32]"),
        ((2, 16), (2, 32), "32 bytes of shape [2, 16]; logical shape [2, 32] needs 34 bytes"),
        ((1, 34), (2, 32), "flat or [2, 17]"),
        ((35,), (2, 32), "needs 34 bytes"),
    ],
)
def test_raw_blocks_that_disagree_with_the_shape_are_refused(
    raw_shape: tuple[int, ...], logical: tuple[int, ...], words: str
) -> None:
    with pytest.raises(DescriptorError) as caught:
        ggml_to_mxfp4(np.zeros(raw_shape, np.uint8), logical, tensor="w", path="m.gguf")
    assert words in caught.value.detail, caught.value.detail
    assert (caught.value.tensor, caught.value.path) == ("w", "m.gguf")


def test_a_hostile_shape_is_refused_before_allocating() -> None:
    """A logical shape claiming 2**60 values over 17 bytes fails on the byte count, at once."""
    with pytest.raises(DescriptorError, match="needs"):
        ggml_to_mxfp4(np.zeros(17, np.uint8), (2**30, 2**30 * 32))
