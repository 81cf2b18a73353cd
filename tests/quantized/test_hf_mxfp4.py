"""MXFP4 dequantization agrees bit for bit with transformers' ``convert_moe_packed_tensors``:
on blocks compressed-tensors' MX quantizer produced, on every (byte, scale byte) pair, in
every output dtype, across chunk edges; bad parts are refused naming both tensors.

torch 2.13's ``QuantizedHuggingFaceStorageReader`` is no oracle here: ``dcp.load`` of a
``[2, 3, 4, 16]`` pair into ``[2, 3, 128]`` requests lengths ``(2, 3, 4)``, the stored
shape's leading dims, and so writes only the first 4 values of each row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.quantized._hf_oracles import (
    NUMPY_OF,
    OUTPUTS,
    as_numpy,
    assert_same_values,
    torch,
)
from weightstore.errors import QuantizedLayoutError
from weightstore.quantized import QuantizedGroup, dequantize_group
from weightstore.quantized._hf_mxfp4 import dequantize_mxfp4

mxfp4 = need("transformers.integrations.mxfp4")


def reference(blocks: Any, scales: Any, output: str) -> Any:
    """transformers' dequantization, turned back to the stored orientation (it transposes the
    last two dims for gpt-oss's experts)."""
    dtype = getattr(torch, output)
    return mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=dtype).transpose(1, 2)


def mx_quantize(weight: Any) -> tuple[Any, Any]:
    """compressed-tensors' MXFP4 quantizer: E8M0 scales from each block's maximum, E2M1 codes,
    packed two a byte; reshaped to gpt-oss's ``[..., G, 16]`` blocks and ``[..., G]`` scales."""
    forward = need("compressed_tensors.quantization.lifecycle.forward")
    quantization = need("compressed_tensors.quantization")
    mx_utils = need("compressed_tensors.quantization.utils.mxfp_utils")
    helpers = need("compressed_tensors.compressors.nvfp4.helpers")
    *leading, rows, columns = weight.shape
    flat = weight.reshape(-1, rows, columns)
    groups = columns // 32
    amax = flat.reshape(flat.shape[0], rows, groups, 32).abs().amax(-1)
    exponents = mx_utils.generate_mx_scales(amax, 4)
    scale = (2.0 ** (exponents - 127)).to(torch.float32)
    args = quantization.QuantizationArgs(num_bits=4, type="float", strategy="group", group_size=32)
    packed = torch.stack(
        [
            helpers.pack_fp4_to_uint8(forward.quantize(flat[e], scale[e], None, args))
            for e in range(flat.shape[0])
        ]
    )
    blocks = packed.reshape(*leading, rows, groups, 16)
    return blocks, exponents.to(torch.uint8).reshape(*leading, rows, groups)


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("shape", [(2, 64, 96), (3, 5, 32), (1, 300, 2048)])
def test_compressed_tensors_blocks_match_transformers(shape: tuple[int, ...], output: str) -> None:
    scale = torch.logspace(-3, 3, shape[1]).reshape(1, -1, 1)
    weight = torch.randn(*shape, generator=torch.Generator().manual_seed(6)) * scale
    blocks, scales = mx_quantize(weight)
    ours = dequantize_mxfp4(as_numpy(blocks), as_numpy(scales), NUMPY_OF[output])
    assert ours.shape == shape
    assert_same_values(ours, reference(blocks, scales, output).contiguous())
    error = (
        np.abs(ours.astype(np.float32) - weight.numpy()) / np.abs(weight.numpy()).max(-1)[..., None]
    )
    assert error.max() < 0.35  # E2M1's step at its top, with the scale rounded to a power of 2


@pytest.mark.parametrize("output", OUTPUTS)
def test_every_byte_under_every_scale_byte_matches_transformers(output: str) -> None:
    """65,536 pairs: zeros and signs, both subnormal ends of float32, and the overflow of
    scale byte 255 (E8M0's NaN, which both references read as 2**128)."""
    blocks = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16).repeat(1, 256, 1, 1)
    scales = torch.arange(256, dtype=torch.uint8).reshape(1, 256, 1).repeat(1, 1, 16)
    ours = dequantize_mxfp4(as_numpy(blocks), as_numpy(scales), NUMPY_OF[output])
    assert_same_values(ours, reference(blocks, scales, output).contiguous())
    assert not np.isnan(ours.astype(np.float32)).any()


def test_chunk_edges_keep_agreement() -> None:
    """More rows than one chunk holds, and a count that is not a multiple of it."""
    generator = torch.Generator().manual_seed(7)
    blocks = torch.randint(0, 256, (1, 9000, 3, 16), dtype=torch.uint8, generator=generator)
    scales = torch.randint(100, 150, (1, 9000, 3), dtype=torch.uint8, generator=generator)
    ours = dequantize_mxfp4(as_numpy(blocks), as_numpy(scales))
    assert_same_values(ours, reference(blocks, scales, "float32").contiguous())


def test_two_dimensional_blocks() -> None:
    """A dense layer's ``[rows, G, 16]``: the reference needs experts, so compare by hand."""
    blocks = np.array([[[0x21] * 16]], np.uint8)  # low nibble 1 (0.5), high 2 (1.0)
    out = dequantize_mxfp4(blocks, np.array([[128]], np.uint8))
    assert out.shape == (1, 32) and list(out[0, :4]) == [1.0, 2.0, 1.0, 2.0]


def _group() -> QuantizedGroup:
    return QuantizedGroup(
        name="e.down",
        layout="mxfp4",
        codes="e.down_blocks",
        companions={"scale": "e.down_scales"},
        logical_shape=(2, 3, 64),
        block=(1, 1, 32),
        rule="test",
    )


def test_group_dequantizes_through_the_registry() -> None:
    parts = {"e.down_blocks": np.zeros((2, 3, 2, 16), np.uint8),
             "e.down_scales": np.full((2, 3, 2), 127, np.uint8)}  # fmt: skip
    parts["e.down_blocks"][0, 0, 0, 0] = 0x70  # high nibble 7: 6.0, element 1
    out = dequantize_group(_group(), parts)
    assert out.shape == (2, 3, 64) and out[0, 0, 1] == 6.0 and out.sum() == 6.0


@pytest.mark.parametrize(
    ("blocks", "scales", "words"),
    [
        (np.zeros((2, 3, 2, 16), np.uint8), np.zeros((2, 3, 3), np.uint8), "need [2, 3, 2]"),
        (np.zeros((2, 3, 2, 16), np.uint8), np.zeros((2, 3, 2), np.int8), "scales are I8"),
        (np.zeros((2, 3, 4, 8), np.uint8), np.zeros((2, 3, 4), np.uint8), "U8 [..., G, 16]"),
        (np.zeros((2, 3, 4, 16), np.uint8), np.zeros((2, 3, 4), np.uint8), "shape is [2, 3, 64]"),
    ],
)
def test_inconsistent_parts_are_refused_naming_both(
    blocks: np.ndarray, scales: np.ndarray, words: str
) -> None:
    with pytest.raises(QuantizedLayoutError) as caught:
        dequantize_group(_group(), {"e.down_blocks": blocks, "e.down_scales": scales})
    assert words in str(caught.value) and caught.value.group == "e.down"
    assert caught.value.codes == "e.down_blocks"


@pytest.mark.parametrize("output", OUTPUTS)
def test_memory_is_the_output_plus_one_chunk(output: str) -> None:
    """4 M values (16 MiB as float32) peak at the output plus a chunk's few MiB."""
    import tracemalloc

    blocks = np.full((1, 1024, 128, 16), 0x21, np.uint8)
    scales = np.full((1, 1024, 128), 127, np.uint8)
    tracemalloc.start()
    try:
        dequantize_mxfp4(blocks, scales, NUMPY_OF[output])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (1 << 22) * NUMPY_OF[output].itemsize + (4 << 20), peak
