"""`weightstore diff`: equal files, changed values, missing tensors, changed dtypes and shapes,
files of different formats; text and JSON; exit codes 0, 1 and 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli._support import assert_error, run_cli, torch_layout_arrays, write_weights
from weightstore.cli._compare import CHUNK_NUMEL, compare_arrays


def _pair(tmp_path: Path, changes: dict[str, np.ndarray | None]) -> tuple[Path, Path]:
    base = torch_layout_arrays()
    changed = {name: array for name, array in {**base, **changes}.items() if array is not None}
    a = write_weights("burnpack", tmp_path / "a.bpk", base)
    b = write_weights("burnpack", tmp_path / "b.bpk", changed)
    return a, b


@pytest.mark.parametrize(("fmt_a", "fmt_b"), [("burnpack", "burnpack"), ("pytorch", "safetensors")])
def test_equal_files_exit_0(tmp_path: Path, fmt_a: str, fmt_b: str) -> None:
    a = write_weights(fmt_a, tmp_path / f"a.{fmt_a}", torch_layout_arrays())
    b = write_weights(fmt_b, tmp_path / f"b.{fmt_b}", torch_layout_arrays())
    done = run_cli("diff", a, b)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"a: {a} ({fmt_a}, 11 tensors)",
        f"b: {b} ({fmt_b}, 11 tensors)",
        "result: equal (11 tensors)",
    ]


def test_every_kind_of_difference_text(tmp_path: Path) -> None:
    base = torch_layout_arrays()
    bias = base["fc.bias"].copy()
    bias[1] += 0.5
    halved = base["ln.weight"].astype(np.float16)
    a, b = _pair(tmp_path, {
        "fc.bias": bias,                                       # one value changed
        "conv.bias": None,                                     # only in a
        "extra": np.zeros(3, np.float32),                      # only in b
        "ln.weight": halved,                                   # dtype changed
        "ln.bias": np.zeros(6, np.float32),                    # shape changed
        "bn.bias": np.zeros(2, np.float16),                    # both changed
        "bn.weight": base["bn.weight"].astype(np.float64),     # dtype changed, values kept
    })  # fmt: skip
    done = run_cli("diff", a, b)
    assert done.returncode == 1, done.stderr
    rel = 0.5 / max(abs(base["fc.bias"][1]), abs(bias[1]))
    rounding = np.abs(halved.astype(np.float64) - base["ln.weight"]).max()
    lines = done.stdout.splitlines()[2:]
    assert lines == [
        "only in a: conv.bias",
        "only in b: extra",
        "dtype differs: bn.bias: F32 vs F16",
        "dtype differs: bn.weight: F32 vs F64 (values equal)",
        lines[4],
        "shape differs: bn.bias: [4] vs [2]",
        "shape differs: ln.bias: [5] vs [6]",
        f"values differ: fc.bias: 1 of 5 elements, max abs diff 0.5, max rel diff {rel:.6g}",
        "result: different (5 of 12 tensors equal)",
    ]
    assert lines[4].startswith("dtype differs: ln.weight: F32 vs F16 (")
    assert f"max abs diff {rounding:.6g}" in lines[4]


def test_json_and_tolerances(tmp_path: Path) -> None:
    base = torch_layout_arrays()
    weight = base["fc.weight"] + np.float32(1e-3)
    a, b = _pair(tmp_path, {"fc.weight": weight, "conv.bias": None})
    done = run_cli("diff", a, b, "--json")
    assert done.returncode == 1
    document = json.loads(done.stdout)
    assert document["equal"] is False
    assert document["only_in_a"] == ["conv.bias"] and document["only_in_b"] == []
    (changed,) = document["values_differ"]
    assert changed["name"] == "fc.weight" and changed["numel"] == 35
    assert changed["differing"] == 35
    assert changed["max_abs"] == pytest.approx(1e-3, rel=1e-2)
    assert isinstance(changed["max_rel"], float)
    assert document["equal_tensors"] == 9
    tolerant = json.loads(run_cli("diff", a, b, "--json", "--atol", "0.01").stdout)
    assert tolerant["values_differ"] == [] and tolerant["equal_tensors"] == 10


def test_nan_and_signed_zero_compare_by_value() -> None:
    a = np.array([np.nan, 0.0, 1.0, np.inf], np.float32)
    b = np.array([np.nan, -0.0, np.nan, -np.inf], np.float32)
    found = compare_arrays(a, b)
    assert found.differing == 2 and found.max_abs == np.inf and found.max_rel == np.inf
    assert compare_arrays(a[:2], b[:2]).differing == 0


def test_values_are_compared_in_chunks() -> None:
    a = np.zeros(CHUNK_NUMEL * 2 + 3, np.float32)
    b = a.copy()
    b[-1] = 2.0
    seen: list[int] = []
    found = compare_arrays(a, b, advance=seen.append)
    assert found.differing == 1 and found.max_abs == 2.0 and found.max_rel == 1.0
    assert len(seen) == 3 and sum(seen) == a.nbytes


def test_integers_compare_exactly() -> None:
    big = np.array([2**62 + 1], np.int64)
    assert compare_arrays(big, big - 1).differing == 1  # equal once both are float64


def test_top_level_key_applies_to_the_pytorch_side(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arrays = torch_layout_arrays()
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"model": {k: torch.from_numpy(v) for k, v in arrays.items()}, "step": 1}, ckpt)
    flat = write_weights("safetensors", tmp_path / "flat.safetensors", arrays)
    assert run_cli("diff", ckpt, flat).returncode == 1  # model.fc.weight vs fc.weight
    assert run_cli("diff", ckpt, flat, "--top-level-key", "model").returncode == 0
    refused = run_cli("diff", flat, flat, "--top-level-key", "model")
    assert_error(refused, 2, "neither file has top-level keys")


def test_unreadable_files_exit_2(tmp_path: Path) -> None:
    a = write_weights("safetensors", tmp_path / "a.safetensors", torch_layout_arrays())
    missing = tmp_path / "missing.bpk"
    assert_error(run_cli("diff", a, missing), 2, f"{missing}: ")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(a.read_bytes()[:-1])
    assert_error(run_cli("diff", cut, a), 2, str(cut))
    assert_error(run_cli("diff", a, a, "--atol", "-1"), 2, "cannot be negative")
