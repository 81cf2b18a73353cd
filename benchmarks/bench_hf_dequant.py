"""SafeTensors quantized layouts: weightstore's FP8 block and MXFP4 kernels against the
reference's own CPU path (transformers' ``Fp8Dequantize`` and ``convert_moe_packed_tensors``)
on the same tensors, at several sizes, to float32 and bfloat16; and int4 pack-quantized against
compressed-tensors' decompressor (``--layouts int4``).

    .venv/bin/python benchmarks/bench_hf_dequant.py               # 1, 4, 16 M elements
    .venv/bin/python benchmarks/bench_hf_dequant.py --quick       # 64 Ki, 256 Ki: seconds
    .venv/bin/python benchmarks/bench_hf_dequant.py --sizes 4 --layouts mxfp4 --repeat 9

FP8 tensors are ``(rows, 4096)`` E4M3 codes of a normal weight quantized in 128x128 blocks
with float32 ``weight_scale_inv``; MXFP4 tensors are gpt-oss-shaped ``[1, rows, G, 16]``
blocks of random bytes with scale bytes 110 to 140. The script checks once per row that both
outputs agree bit for bit (NaN-free data). transformers' MXFP4 call also transposes its result
to gpt-oss's experts layout (a contiguous copy), which it cannot skip; ours keeps the stored
orientation. torch runs on one thread (``torch.set_num_threads(1)``) as NumPy's loops do, so
both sides use one core: **MB/s** is output bytes per CPU second, **ratio** = the reference's
median ÷ ours (above 1, ours is faster).

Times are the median (min) of `--repeat` calls after one warm-up call, the two sides
alternating call by call, in CPU seconds of this process (`time.process_time`), which other
processes on a busy machine do not inflate the way they do wall time; the JSON holds both.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gguf_dequant import alternating
from weightstore.quantized._hf_fp8 import dequantize_fp8
from weightstore.quantized._hf_mxfp4 import dequantize_mxfp4

ROW_ELEMENTS = 4096
OUTPUTS = {"f32": (np.float32, "float32"), "bf16": (ml_dtypes.bfloat16, "bfloat16")}


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view({2: np.uint16, 4: np.uint32}[array.dtype.itemsize])


def fp8_row(elements: int, output: str, repeat: int) -> dict[str, Any]:
    import torch
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    rows = elements // ROW_ELEMENTS
    weight = torch.randn(rows, ROW_ELEMENTS, generator=torch.Generator().manual_seed(rows))
    grid = (-(-rows // 128), ROW_ELEMENTS // 128)
    padded = torch.zeros(grid[0] * 128, ROW_ELEMENTS)
    padded[:rows] = weight
    tiles = padded.reshape(grid[0], 128, grid[1], 128)
    scale = (tiles.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0).to(torch.float32)
    codes = (tiles / scale[:, None, :, None]).to(torch.float8_e4m3fn).reshape(padded.shape)
    codes = codes[:rows].contiguous()
    numpy_dtype, torch_name = OUTPUTS[output]
    torch_dtype = getattr(torch, torch_name)
    np_codes = codes.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    np_scale = scale.numpy()
    reference = Fp8Dequantize(None)
    if rows % 128:
        raise SystemExit("FP8 rows must be whole 128-row blocks (Fp8Dequantize needs them)")
    ours = dequantize_fp8(np_codes, np_scale, (128, 128), numpy_dtype)
    theirs = reference._dequantize_one(codes, scale, output_dtype=torch_dtype)
    unsigned = {2: torch.int16, 4: torch.int32}[theirs.element_size()]
    if not np.array_equal(_bits(ours), theirs.view(unsigned).numpy().view(_bits(ours).dtype)):
        raise SystemExit(f"fp8-block {output}, {elements:,} elements: the outputs differ")
    calls: dict[str, Callable[[], object]] = {
        "ours": lambda: dequantize_fp8(np_codes, np_scale, (128, 128), numpy_dtype),
        "reference": lambda: reference._dequantize_one(codes, scale, output_dtype=torch_dtype),
    }
    return _row("fp8-block", output, elements, ours.itemsize, calls, repeat)


def mxfp4_row(elements: int, output: str, repeat: int) -> dict[str, Any]:
    import torch
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    rows = elements // ROW_ELEMENTS
    generator = torch.Generator().manual_seed(rows)
    groups = ROW_ELEMENTS // 32
    blocks = torch.randint(0, 256, (1, rows, groups, 16), dtype=torch.uint8, generator=generator)
    scales = torch.randint(110, 141, (1, rows, groups), dtype=torch.uint8, generator=generator)
    numpy_dtype, torch_name = OUTPUTS[output]
    torch_dtype = getattr(torch, torch_name)
    np_blocks, np_scales = blocks.numpy(), scales.numpy()
    ours = dequantize_mxfp4(np_blocks, np_scales, numpy_dtype)
    theirs = convert_moe_packed_tensors(blocks, scales, dtype=torch_dtype).transpose(1, 2)
    unsigned = {2: torch.int16, 4: torch.int32}[theirs.element_size()]
    expected = theirs.contiguous().view(unsigned).numpy().view(_bits(ours).dtype)
    if not np.array_equal(_bits(ours), expected):
        raise SystemExit(f"mxfp4 {output}, {elements:,} elements: the outputs differ")
    calls: dict[str, Callable[[], object]] = {
        "ours": lambda: dequantize_mxfp4(np_blocks, np_scales, numpy_dtype),
        "reference": lambda: convert_moe_packed_tensors(blocks, scales, dtype=torch_dtype),
    }
    return _row("mxfp4", output, elements, ours.itemsize, calls, repeat)


def int4_row(elements: int, output: str, repeat: int) -> dict[str, Any]:
    """int4 pack-quantized, group 128, asymmetric: compressed-tensors' own decompressor (which
    unpacks the words and dequantizes in the scale's dtype) against ours."""
    import torch
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    from weightstore.quantized._hf_int import dequantize_int_pack, resolve_int_pack, rule_int_pack

    numpy_dtype, torch_name = OUTPUTS[output]
    torch_dtype = getattr(torch, torch_name)
    rows, group_size = elements // ROW_ELEMENTS, 128
    torch.manual_seed(4)
    weight = torch.randn(rows, ROW_ELEMENTS).to(torch_dtype)
    args = QuantizationArgs(
        num_bits=4, type="int", strategy="group", group_size=group_size, symmetric=False
    )
    blocks = weight.reshape(rows, ROW_ELEMENTS // group_size, group_size)
    scale, zero = calculate_qparams(blocks.amin(-1), blocks.amax(-1), args)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    state = {"weight": weight, "weight_scale": scale.to(torch_dtype), "weight_zero_point": zero}
    compressed = PackedQuantizationCompressor.compress(state, scheme)
    parts = {
        f"m.{name}": (
            tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
            if tensor.dtype == torch.bfloat16 else tensor.numpy()
        )
        for name, tensor in compressed.items()
    }  # fmt: skip
    infos = {
        name: ({"int32": "I32", "int64": "I64", "float32": "F32", "bfloat16": "BF16"}[
            array.dtype.name], tuple(array.shape))
        for name, array in parts.items()
    }  # fmt: skip
    config = {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"g": {"targets": ["Linear"], "weights": args.model_dump()}},
    }  # fmt: skip
    (group,) = rule_int_pack(infos, config)
    group = resolve_int_pack(group, parts["m.weight_shape"], infos)
    calls: dict[str, Callable[[], object]] = {
        "ours": lambda: dequantize_int_pack(group, parts, numpy_dtype),
        "reference": lambda: PackedQuantizationCompressor.decompress(compressed, scheme),
    }
    return _row("int4", output, elements, np.dtype(numpy_dtype).itemsize, calls, repeat)


def _row(
    layout: str,
    output: str,
    elements: int,
    itemsize: int,
    calls: dict[str, Callable[[], object]],
    repeat: int,
) -> dict[str, Any]:
    times = alternating(calls, repeat)
    megabytes = elements * itemsize / 1e6
    ours, theirs = times["ours"]["cpu"][0], times["reference"]["cpu"][0]
    return {
        "layout": layout,
        "output": output,
        "elements": elements,
        **times,
        "ours_mb_s": megabytes / ours,
        "reference_mb_s": megabytes / theirs,
        "ratio": theirs / ours,
    }


MEASURES = {"fp8-block": fp8_row, "mxfp4": mxfp4_row, "int4": int4_row}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 Ki and 256 Ki elements")
    parser.add_argument("--sizes", default="1,4,16", help="M elements (2**20), comma-separated")
    parser.add_argument("--layouts", default="fp8-block,mxfp4")
    parser.add_argument("--outputs", default="f32,bf16")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="also write every row as JSON here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.quick:
        sizes = [1 << 19, 1 << 20]  # whole 128-row blocks of 4096 columns
    else:
        sizes = [int(float(size) * (1 << 20)) for size in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    print(f"{'layout':<10} {'out':<5} {'elements':>11} {'ours CPU ms':>17} "
          f"{'reference CPU ms':>17} {'ours MB/s':>10} {'ref MB/s':>10} {'ratio':>7}")  # fmt: skip
    for layout in args.layouts.split(","):
        for output in args.outputs.split(","):
            for elements in sizes:
                row = MEASURES[layout](elements, output, args.repeat)
                rows.append(row)
                ours, theirs = row["ours"]["cpu"], row["reference"]["cpu"]
                print(f"{layout:<10} {output:<5} {elements:>11,} "
                      f"{f'{ours[0] * 1e3:,.1f} ({ours[1] * 1e3:,.1f})':>17} "
                      f"{f'{theirs[0] * 1e3:,.1f} ({theirs[1] * 1e3:,.1f})':>17} "
                      f"{row['ours_mb_s']:>10,.0f} {row['reference_mb_s']:>10,.0f} "
                      f"{row['ratio']:>6.2f}x")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
