"""Quantized groups in a sharded set loaded through a name filter: a load that reads only the
tensors the filter keeps must still see every part of a group, or codes kept without their
scales would pass for weights (F8 widens to BF16 exactly)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tests._optional import need
from weightstore import SafetensorsStore
from weightstore.errors import InvalidOptionError


def _set(directory: Path) -> None:
    codes = np.full((256, 256), 1.5, ml_dtypes.float8_e4m3fn)
    scale = np.array([[2.0, 4.0], [8.0, 16.0]], np.float32)
    other = np.zeros((256, 256), ml_dtypes.bfloat16)
    model = {"fc": {"weight": codes, "weight_scale_inv": scale}, "other": {"weight": other}}
    SafetensorsStore.from_file(str(directory)).with_max_shard_size(70_000).collect_from(model)
    assert len(list(directory.glob("*.safetensors"))) == 2


def test_a_filter_keeping_codes_only_is_refused_on_a_set(tmp_path: Path) -> None:
    torch = need("torch")
    _set(tmp_path)
    model = torch.nn.Sequential()
    model.add_module("fc", torch.nn.Linear(256, 256, bias=False, dtype=torch.bfloat16))
    before = model.fc.weight.detach().clone()
    store = SafetensorsStore.from_file(str(tmp_path)).with_regex(r"^fc\.weight$")
    with pytest.raises(InvalidOptionError, match=r"'fc\.weight' and drops 'fc\.weight_scale_inv'"):
        store.apply_to(model)
    assert torch.equal(model.fc.weight, before)

    result = store.with_dequantize("bf16").apply_to(model)
    assert result.quantized == {"fc.weight": "fp8-block"}
    weight = model.fc.weight.detach().float().numpy()
    assert weight[0, 0] == 3.0 and weight[255, 255] == 24.0  # 1.5 x each block's scale
