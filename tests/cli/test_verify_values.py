"""``verify --values``: NaN and Inf fail with counts per tensor; all-zero and constant float
tensors warn; integers are never judged for NaN; large tensors are scanned in chunks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.cli._support import ERROR_PREFIX, write_weights
from weightstore.cli import _values, main

WARNING_PREFIX = "weightstore: warning: "


def _run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, list[str], list[str]]:
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out.splitlines(), err.splitlines()


def _healthy() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    return {
        "fc.weight": rng.standard_normal((4, 5)).astype(np.float32),
        "steps": np.array(0, dtype=np.int64),  # a scalar zero is no sign of anything
        "ids": np.arange(6, dtype=np.int32),
    }


def test_healthy_values_pass_with_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_weights("safetensors", tmp_path / "m.safetensors", _healthy())
    code, out, err = _run(capsys, "verify", "--values", path)
    assert (code, err) == (0, [])
    assert (
        out[1] == "  note: values of 3 tensors scanned: 0 with NaN or Inf, 0 all-zero, 0 constant"
    )


@pytest.mark.parametrize(
    ("fmt", "dtype"),
    [
        *[("safetensors", dtype) for dtype in (np.float32, np.float64, np.float16)],
        ("safetensors", ml_dtypes.bfloat16),
        ("safetensors", ml_dtypes.float8_e5m2),  # burnpack holds no f8
        ("burnpack", np.float32),
        ("burnpack", ml_dtypes.bfloat16),
        ("pytorch", np.float32),
    ],
    ids=["st-f32", "st-f64", "st-f16", "st-bf16", "st-f8_e5m2", "bpk-f32", "bpk-bf16", "pt-f32"],
)
def test_nan_and_inf_fail_with_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, dtype: Any
) -> None:
    bad = np.linspace(-1, 1, 24, dtype=np.float32)
    bad[[1, 5, 7]] = np.nan
    bad[10] = np.inf
    bad[11] = -np.inf
    arrays = {**_healthy(), "bad": bad.astype(dtype)}
    path = write_weights(fmt, tmp_path / f"m.{fmt}", arrays)
    code, out, err = _run(capsys, "verify", "--values", path)
    assert code == 2
    assert out[0].startswith(f"{path}: FAILED")
    assert "  tensor 'bad': 3 NaN and 2 Inf among 24 values" in out
    assert err == [f"{ERROR_PREFIX}{path}: verification failed (1 problem)"]


def test_f8_e4m3_nan_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """e4m3fn has no Inf: an overflow is NaN there, counted as such."""
    bad = np.array([0.5, np.nan, 1.0, np.nan], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    path = write_weights("safetensors", tmp_path / "m.safetensors", {"bad": bad})
    code, out, _ = _run(capsys, "verify", "--values", path)
    assert code == 2 and "  tensor 'bad': 2 NaN among 4 values" in out


def test_all_zero_and_constant_tensors_warn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrays = {
        **_healthy(),
        "zeros": np.zeros((3, 4), dtype=ml_dtypes.bfloat16),
        "int_zeros": np.zeros(8, dtype=np.int32),
        "halves": np.full(10, 0.5, dtype=np.float16),
        "int_sevens": np.full(5, 7, dtype=np.int64),  # constant ints: no warning
    }
    path = write_weights("safetensors", tmp_path / "m.safetensors", arrays)
    code, out, err = _run(capsys, "verify", "--values", path)
    assert code == 0
    assert out[0].startswith(f"{path}: ok")
    assert "  note: values of 7 tensors scanned: 0 with NaN or Inf, 2 all-zero, 1 constant" in out
    assert sorted(err) == sorted(
        [
            f"{WARNING_PREFIX}{path}: tensor 'zeros': all 12 values are zero",
            f"{WARNING_PREFIX}{path}: tensor 'int_zeros': all 8 values are zero",
            f"{WARNING_PREFIX}{path}: tensor 'halves': all 10 values are 0.5",
        ]
    )


def test_a_large_tensor_is_scanned_in_chunks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counts add up across chunks, and a tensor constant in one chunk but not the next is not
    constant: a chunk of 7 elements over 50."""
    monkeypatch.setattr(_values, "VALUE_CHUNK_ELEMENTS", 7)
    values = np.full(50, 2.0, dtype=np.float32)
    values[[3, 20, 49]] = np.nan
    values[30] = 3.0
    zeros_then_one = np.zeros(50, dtype=np.float32)
    zeros_then_one[-1] = 1.0
    arrays = {"mixed": values, "almost_zero": zeros_then_one}
    path = write_weights("safetensors", tmp_path / "m.safetensors", arrays)
    code, out, err = _run(capsys, "verify", "--values", path)
    assert code == 2
    assert "  tensor 'mixed': 3 NaN among 50 values" in out
    assert not [line for line in err if line.startswith(WARNING_PREFIX)]


def test_without_the_flag_values_are_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrays = {"bad": np.array([np.nan, 1.0], dtype=np.float32)}
    path = write_weights("safetensors", tmp_path / "m.safetensors", arrays)
    code, out, err = _run(capsys, "verify", path)
    assert (code, err) == (0, [])
    assert out == [f"{path}: ok (safetensors, 1 tensor, 8 bytes read)"]
