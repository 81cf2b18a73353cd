"""`weightstore inspect` on SafeTensors files, found by content rather than by extension."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import burn_fixture
from weightstore import safetensors
from weightstore.cli import main
from weightstore.dtypes import from_safetensors
from weightstore.entry import TensorEntry


def test_inspect_json_on_burn_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = burn_fixture("safetensors-tests/multi_layer/multi_layer.safetensors")
    assert main(["inspect", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["format"] == "safetensors" and document["version"] is None
    assert document["metadata"] == {} and document["file_size"] == 17_624
    assert len(document["tensors"]) == 9
    assert document["tensors"][0] == {
        "name": "norm1.num_batches_tracked", "dtype": "I64", "shape": [],
        "nbytes": 8, "offset": 656,
    }  # fmt: skip
    assert document["total_nbytes"] == 16_968


def test_inspect_text_with_metadata_and_packed_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "weights.bin"  # the extension says nothing; the content does
    entries = [
        TensorEntry.from_array("w", np.zeros((2, 3), np.float32)),
        TensorEntry("packed", from_safetensors("F4"), (4,), b"\x00\x00"),
    ]
    safetensors.write_file(path, entries, {"producer": "test"})
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "format:   safetensors" in out
    assert "producer = test" in out
    assert "packed" in out and "F4" in out  # listed although NumPy cannot hold it
    assert out.rstrip().endswith("total: 2 tensors, 10 elements, 26 bytes")


def test_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}" + b"junk")
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "4 bytes follow" in err
