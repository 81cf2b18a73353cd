"""Quantized checkpoints for the sliced-load tests, and what each rank checks of them.

`write_checkpoint` writes, with torch and the safetensors package, a DeepSeek-style FP8 block
pair (quantized by DeepSeek's rule, `tests.quantized._hf_oracles.deepseek_quantize`), a gpt-oss
MXFP4 pair of random bytes and a plain bias. The oracle of every value is `dequantize_group` of
the whole tensor, sliced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import torch
from safetensors.torch import save_file

from tests.distributed._counting import counting_reads
from tests.quantized._hf_oracles import deepseek_quantize
from weightstore import SafetensorsStore
from weightstore.distributed import chunk_bounds, load
from weightstore.quantized import QuantizedGroup, dequantize_group

ROWS, COLUMNS = 512, 384  # FP8 blocks of 128: 4 x 3 scales; rows split 2 ways on blocks
EXPERTS, MX_ROWS, GROUPS = 2, 6, 8  # MXFP4 [2, 6, 8, 16] bytes: [2, 6, 256] values
FP8 = QuantizedGroup(
    name="fc.weight", layout="fp8-block", codes="fc.weight",
    companions={"scale": "fc.weight_scale_inv"}, logical_shape=(ROWS, COLUMNS),
    block=(128, 128), rule="test",
)  # fmt: skip
MXFP4 = QuantizedGroup(
    name="experts.down", layout="mxfp4", codes="experts.down_blocks",
    companions={"scale": "experts.down_scales"}, logical_shape=(EXPERTS, MX_ROWS, GROUPS * 32),
    block=(1, 32), rule="test",
)  # fmt: skip


def write_checkpoint(path: Path, rows: int = ROWS, columns: int = COLUMNS) -> None:
    generator = torch.Generator().manual_seed(0)
    codes, scale = deepseek_quantize(torch.randn(rows, columns, generator=generator))
    blocks = torch.randint(0, 256, (EXPERTS, MX_ROWS, GROUPS, 16), generator=generator)
    scales = torch.randint(118, 134, (EXPERTS, MX_ROWS, GROUPS), generator=generator)
    save_file({
        "fc.weight": codes, "fc.weight_scale_inv": scale,
        "experts.down_blocks": blocks.to(torch.uint8),
        "experts.down_scales": scales.to(torch.uint8),
        "fc.bias": torch.randn(rows, generator=generator),
    }, str(path))  # fmt: skip


def stored(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    """Every stored tensor as NumPy, read by the safetensors package (FP8 as ml_dtypes')."""
    from safetensors import safe_open

    tensors = {}
    with safe_open(str(path), "pt") as opened:
        for name in opened.keys():  # noqa: SIM118 (safe_open has no __iter__)
            tensor = opened.get_tensor(name)
            if tensor.dtype == torch.float8_e4m3fn:
                tensors[name] = tensor.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
            else:
                tensors[name] = tensor.numpy()
    return tensors


def dequantized(path: Path, group: QuantizedGroup, rows: int = ROWS) -> np.ndarray[Any, Any]:
    """The oracle: the whole group dequantized to float32."""
    parts = stored(path)
    if group.layout == "fp8-block":
        group = group.replace(logical_shape=(rows, COLUMNS))
    return dequantize_group(group, {p: parts[p] for p in group.parts}, np.float32)


def chunk_of(array: np.ndarray[Any, Any], dim: int, rank: int, world_size: int) -> Any:
    start, stop = chunk_bounds(array.shape[dim], rank, world_size)
    return array[(slice(None),) * dim + (slice(start, stop),)]


def parts_model(rank: int, world_size: int) -> dict[str, Any]:
    """A model holding this rank's parts: FP8 rows and their scale rows, MXFP4 blocks G."""
    start, stop = chunk_bounds(ROWS, rank, world_size)
    first, last = chunk_bounds(GROUPS, rank, world_size)
    return {
        "fc": {
            "weight": np.zeros((stop - start, COLUMNS), ml_dtypes.float8_e4m3fn),
            "weight_scale_inv": np.zeros(((stop - start) // 128, COLUMNS // 128), np.float32),
            "bias": np.zeros(ROWS, np.float32),
        },
        "experts": {
            "down_blocks": np.zeros((EXPERTS, MX_ROWS, last - first, 16), np.uint8),
            "down_scales": np.zeros((EXPERTS, MX_ROWS, last - first), np.uint8),
        },
    }


PARTS_PLAN = {r"^fc\.weight$": 0, r"^experts\.down_blocks$": -2}
VALUES_PLAN = {r"^fc\.weight$": 0, r"^experts\.down$": -1}


def values_model(rank: int, world_size: int, rows: int = ROWS) -> dict[str, Any]:
    start, stop = chunk_bounds(rows, rank, world_size)
    first, last = chunk_bounds(GROUPS * 32, rank, world_size)
    return {
        "fc": {
            "weight": np.zeros((stop - start, COLUMNS), np.float32),
            "bias": np.zeros(rows, np.float32),
        },
        "experts": {"down": np.zeros((EXPERTS, MX_ROWS, last - first), np.float32)},
    }


def check_rank(path: Path, rank: int, world_size: int, *, grouped: bool = False) -> int:
    """Both loads on one rank, checked against the oracles; returns the bytes the
    dequantizing load read. `grouped`: the rank and world size come from the process group."""
    parts = stored(path)
    model = parts_model(rank, world_size)
    place = {} if grouped else {"rank": rank, "world_size": world_size}
    assert load(SafetensorsStore.from_file(path), model, PARTS_PLAN, **place).is_success()
    for name, dim in (("fc.weight", 0), ("fc.weight_scale_inv", 0), ("experts.down_blocks", 2),
                      ("experts.down_scales", 2)):  # fmt: skip
        module, leaf = name.split(".")
        got = model[module][leaf]
        want = chunk_of(parts[name], dim, rank, world_size)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (rank, name)
    values = values_model(rank, world_size)
    with counting_reads() as counter:
        store = SafetensorsStore.from_file(path).with_dequantize("f32")
        assert load(store, values, VALUES_PLAN, **place).is_success()
    assert np.array_equal(
        values["fc"]["weight"], chunk_of(dequantized(path, FP8), 0, rank, world_size)
    )
    want = chunk_of(dequantized(path, MXFP4), 2, rank, world_size)
    assert np.array_equal(values["experts"]["down"], want, equal_nan=True)
    return counter.total


def share_read(path: Path, rank: int, world_size: int) -> int:
    """What a dequantizing load of `VALUES_PLAN` should read on `rank`: the header, the bias
    and this rank's codes and scales (each split on block edges, so nothing more)."""
    with counting_reads() as opening:
        SafetensorsStore.from_file(path).keys()
    start, stop = chunk_bounds(ROWS, rank, world_size)
    first, last = chunk_bounds(GROUPS, rank, world_size)
    fp8 = (stop - start) * COLUMNS + (stop - start) // 128 * (COLUMNS // 128) * 4
    mxfp4 = EXPERTS * MX_ROWS * (last - first) * (16 + 1)
    return opening.total + ROWS * 4 + fp8 + mxfp4
