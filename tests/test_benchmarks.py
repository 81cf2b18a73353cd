"""The benchmark script runs end to end in its quick mode and reports every row (no timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # runs every benchmark once: about 6 s

pytest.importorskip("torch")
pytest.importorskip("safetensors")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_io.py"

EXPECTED_ROWS = [
    # save
    "baseline: write",
    "baseline: write+fsync",
    "ws.burnpack write_file",
    "ws.burnpack write_to",
    "ws.safetensors write_file",
    "ws.safetensors write_to",
    "st.numpy.save_file",
    "st.numpy.save_file+fsync",
    "st.torch.save_file+fsync",
    "torch.save+fsync",
    # load
    "baseline: np.fromfile",
    "baseline: mmap+touch",
    "ws.burnpack reader (mmap)",
    "ws.burnpack reader (mmap, file order)",
    "ws.burnpack reader (pread)",
    "ws.safetensors reader (mmap)",
    "st.numpy.load_file",
    "st.safe_open(np)",
    "st.torch.load_file",
    "torch.load(mmap=True)",
    "torch.load",
    # open and many small tensors
    "ws.burnpack open [40 tensors]",
    "ws.safetensors open [500 tensors]",
    "st.safe_open(np) + keys [500 tensors]",
    "save: st.numpy.save_file",
    "load: ws.burnpack reader (mmap)",
    # store level
    "save_into(BurnpackStore)",
    "save_into(SafetensorsStore)",
    "st.torch.save_model+fsync",
    "torch.save(state_dict)+fsync",
    "load_from(BurnpackStore)",
    "load_from(SafetensorsStore)",
    "st.torch.load_model",
    "torch.load + load_state_dict",
    # peak memory
    "ws.burnpack write_file (deferred producers)",
    "st.numpy.save_file (arrays in memory)",
]


def test_quick_run_prints_every_row(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for section in ("SAVE", "LOAD, warm", "OPEN ONLY", "MANY SMALL", "STORE LEVEL", "PEAK"):
        assert f"== {section}" in done.stdout
    lines = done.stdout.splitlines()
    for name in EXPECTED_ROWS:
        assert any(line.startswith(name + " ") for line in lines), name
    document = json.loads(out.read_text())
    names = {row["name"] for row in document["rows"]}
    assert set(EXPECTED_ROWS) <= names
    assert all(row["ratio"] != "?" for row in document["rows"])


PATHS_SCRIPT = SCRIPT.parent / "bench_paths.py"
PATHS_ROWS = [
    "import", "import-load", "load", "meta", "pt", "small", "inspect", "save-nofsync",
    "save-fsync", "cold", "burnpack", "convert",
]  # fmt: skip


def test_paths_quick_run_reports_every_issue_row(tmp_path: Path) -> None:
    # Each call is a fresh process importing torch: 1-2 minutes on a 2-core machine.
    out = tmp_path / "paths.json"
    done = subprocess.run(
        [sys.executable, str(PATHS_SCRIPT), "--quick", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [row["key"] for row in rows] == PATHS_ROWS
    assert [row["number"] for row in rows] == list(range(1, 13))
    for row in rows:
        if row.get("skipped"):  # only the cold row may be, where eviction does not work
            assert row["key"] == "cold", row
            continue
        assert row["ours"]["median_s"] > 0 and row["peer"]["median_s"] > 0, row
        assert row["ratio"] > 0, row
        assert f"| {row['title']} |" in done.stdout
    rss = rows[-1]["peak_rss_bytes"]
    assert rss["ours"] > 0 and rss["peer"] > 0 and rss["largest_tensor"] == 4 * 1000 * 64


CONVERT_SCRIPT = SCRIPT.parent / "bench_convert_large.py"


def test_large_convert_script_checks_values_and_the_memory_bound(tmp_path: Path) -> None:
    # A 32 MiB model in 8 MiB tensors: the bound (8 + 128 MiB) holds trivially at this size;
    # what this checks is that both sides run, their outputs are compared, figures recorded.
    out = tmp_path / "convert.json"
    done = subprocess.run(
        [sys.executable, str(CONVERT_SCRIPT), "--size-gib", str(32 / 1024), "--tensor-mib", "8",
         "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout.splitlines()
    result = json.loads(out.read_text())
    assert result["tensors"] == 4 and result["largest_tensor_bytes"] == 8 << 20
    assert result["within_bound"] is True
    assert result["ours"]["peak_rss"] <= result["bound_bytes"]
    for side in ("ours", "peer"):
        assert result[side]["seconds"] > 0 and result[side]["peak_rss"] > 0
    assert (tmp_path / "ours.safetensors").stat().st_size > 32 << 20


GGUF_SCRIPT = SCRIPT.parent / "bench_gguf_dequant.py"


def _quick_rows(script: Path, out: Path) -> tuple[list[dict[str, Any]], str]:
    """A dequantization benchmark's ``--quick`` run: its JSON rows and what it printed."""
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--repeat", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(out.read_text())["rows"]
    return rows, done.stdout


def test_gguf_dequant_quick_run_times_both_sides_of_every_row(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    rows, printed = _quick_rows(GGUF_SCRIPT, tmp_path / "gguf.json")
    assert [(row["type"], row["elements"]) for row in rows] == [
        (name, size) for name in ("Q4_K", "Q6_K", "Q8_0") for size in (1 << 16, 1 << 18)
    ]
    for row in rows:
        assert row["ours"]["cpu"][0] > 0 and row["gguf"]["wall"][0] > 0, row
        assert row["into"]["cpu"][0] > 0, row
        assert row["ratio"] > 0 and row["ratio_into"] > 0, row
        assert f"{row['elements']:,}" in printed


HF_SCRIPT = SCRIPT.parent / "bench_hf_dequant.py"


def test_hf_dequant_quick_run_times_both_sides_of_every_row(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    rows, printed = _quick_rows(HF_SCRIPT, tmp_path / "hf.json")
    assert [(row["layout"], row["output"], row["elements"]) for row in rows] == [
        (layout, output, size)
        for layout in ("fp8-block", "mxfp4")
        for output in ("f32", "bf16")
        for size in (1 << 19, 1 << 20)
    ]
    for row in rows:
        assert row["ours"]["cpu"][0] > 0 and row["reference"]["wall"][0] > 0, row
        assert row["ratio"] > 0 and f"{row['elements']:,}" in printed


LAYOUT_SCRIPT = SCRIPT.parent / "bench_layout_peak.py"


def test_layout_peak_quick_run_prints_both_peaks_per_size() -> None:
    pytest.importorskip("safetensors")
    done = subprocess.run(
        [sys.executable, str(LAYOUT_SCRIPT), "--quick"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [row[:2] for row in rows] == [["4", "256"], ["8", "256"]]
    for row in rows:
        group, ours, peer = map(float, row[3:6])
        assert group > 0 and ours > 0 and peer > 0, row
        converted, peer_converted = map(float, row[8:10])
        assert converted > 0 and peer_converted > 0, row


TRAINING_SCRIPT = SCRIPT.parent / "bench_training_convert.py"


def test_training_convert_quick_run_prints_both_peaks_per_size() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    done = subprocess.run(
        [sys.executable, str(TRAINING_SCRIPT), "--quick"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert len(rows) == 2, done.stdout
    for row in rows:
        size, ours, peer = map(float, row[:3])
        assert size > 0.05 and ours > 0 and peer > 0, row


ZERO_SCRIPT = SCRIPT.parent / "bench_zero_convert.py"


def test_zero_convert_quick_run_compares_both_outputs(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    done = subprocess.run(
        [sys.executable, str(ZERO_SCRIPT), "--quick"],
        capture_output=True, text=True, timeout=900, check=True, env=env,
    )  # fmt: skip
    assert "4 tensors equal" in done.stdout, done.stdout
    ours, peer, ratio = map(float, done.stdout.splitlines()[-1].split())
    assert ours > 0 and peer > 0 and ratio > 0
