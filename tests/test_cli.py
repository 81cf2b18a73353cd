"""The command line called in-process: inspect as text and JSON, the demo, and one-line errors
with exit code 2. Every command and flag through ``python -m weightstore`` is in tests/cli/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from weightstore import burnpack
from weightstore.cli import main
from weightstore.cli._demo import EXAMPLE_METADATA, example_bytes, example_path
from weightstore.entry import TensorEntry


def test_bundled_example_is_what_the_generator_writes() -> None:
    assert Path(example_path()).read_bytes() == example_bytes()


def test_inspect_json_on_a_burnpack_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.bpk"
    weight = TensorEntry.from_array("conv.weight", np.ones((64, 1, 3, 3), np.float32))
    burnpack.write_file(path, [weight])
    assert main(["inspect", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["format"] == "burnpack"
    assert document["metadata"] == {}
    assert document["tensors"] == [{
        "name": "conv.weight", "dtype": "F32", "shape": [64, 1, 3, 3],
        "nbytes": 2304, "offset": 256,
    }]  # fmt: skip
    assert document["total_nbytes"] == 2304
    main(["inspect", str(path)])
    assert capsys.readouterr().out.rstrip().endswith("total: 1 tensor, 576 elements, 2,304 bytes")


def test_inspect_text_lists_tensors_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", example_path()]) == 0
    out = capsys.readouterr().out
    assert "format:   burnpack (version 1)" in out
    assert "model = tiny_cnn" in out and "epoch = 3" in out
    assert "embedding.weight   BF16   [16, 4]" in out
    assert out.rstrip().endswith("total: 9 tensors, 1,466 elements, 5,736 bytes")


def test_inspect_json_metadata_and_bf16(capsys: pytest.CaptureFixture[str]) -> None:
    main(["inspect", example_path(), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert document["metadata"] == EXAMPLE_METADATA
    assert {t["name"]: t["dtype"] for t in document["tensors"]}["embedding.weight"] == "BF16"


def test_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.bpk"
    bad.write_bytes(b"NRUB\x09\x00\x00\x00\x00\x00")
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert str(bad) in err and "version is 9" in err


def test_missing_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "nope.bpk")]) == 2
    assert "nope.bpk" in capsys.readouterr().err


def test_demo_round_trip_is_identical(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    assert "bytes identical" in capsys.readouterr().out


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "weightstore", "inspect", example_path(), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout)["format"] == "burnpack"


@pytest.mark.parametrize("protocol", [1, 2])
def test_inspect_detects_legacy_pickles_of_any_protocol(
    protocol: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2, 3)}, path, _use_new_zipfile_serialization=False,
               pickle_protocol=protocol)  # fmt: skip
    assert main(["inspect", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["format"] == "pytorch"
    assert [(t["name"], t["shape"]) for t in document["tensors"]] == [("w", [2, 3])]


def test_protocol_0_legacy_file_is_detected_and_refused_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # torch writes such files but cannot read them back (its persistent ids become text).
    torch = pytest.importorskip("torch")
    path = tmp_path / "legacy0.pt"
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False, pickle_protocol=0)
    assert main(["inspect", str(path)]) == 2
    assert "persistent id" in capsys.readouterr().err
