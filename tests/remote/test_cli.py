"""The command line on URLs: `inspect` reads the header alone, `verify`, `diff` and `convert`
read what they need by range requests; ``--storage-option`` reaches the filesystem."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.remote.conftest import Counter, HttpServer, burnpack_bytes, safetensors_bytes
from weightstore.cli import main

# URLs need the remote extra; the oracles are torch and the safetensors package.
need("fsspec")
torch = need("torch")
safetensors_numpy = need("safetensors.numpy")

HEAD = 64 * 1024


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "enc.weight": rng.standard_normal((256, 512)).astype(np.float32),
        "enc.bias": rng.standard_normal(256).astype(np.float32),
        "head.weight": rng.standard_normal((10, 256)).astype(np.float32),
    }


def _flags(storage_options: dict[str, Any]) -> list[str]:
    return [f for k, v in storage_options.items() for f in ("--storage-option", f"{k}={v}")]


def test_inspect_reads_only_the_header(
    s3_put: Any, storage_options: dict, counter: Counter, capsys: pytest.CaptureFixture[str]
) -> None:
    data = safetensors_bytes(_tensors())
    url = s3_put("model.safetensors", data)
    counter.reset()
    assert main(["inspect", url, "--json", *_flags(storage_options)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "safetensors" and report["file_size"] == len(data)
    assert sorted(row["name"] for row in report["tensors"]) == sorted(_tensors())
    assert counter.operations() == ["get_object"] and counter.nbytes == HEAD


def test_inspect_a_pytorch_file_over_http(
    http_server: HttpServer, capsys: pytest.CaptureFixture[str]
) -> None:
    buffer = io.BytesIO()
    torch.save({k: torch.from_numpy(v) for k, v in _tensors().items()}, buffer)
    (http_server.root / "model.pt").write_bytes(buffer.getvalue())
    assert main(["inspect", http_server.url("model.pt"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "pytorch" and len(report["tensors"]) == 3
    assert report["file_size"] == len(buffer.getvalue())
    assert http_server.nbytes < 2 * HEAD  # no storage read: the head and the tail


def test_verify_reads_every_tensor_in_few_requests(
    s3_put: Any, storage_options: dict, counter: Counter, capsys: pytest.CaptureFixture[str]
) -> None:
    url = s3_put("model.bpk", burnpack_bytes(_tensors()))
    counter.reset()
    assert main(["verify", url, "-q", *_flags(storage_options)]) == 0
    assert "ok" in capsys.readouterr().out.lower()
    assert counter.count <= 2  # the head, then every tensor in one planned batch


def test_verify_reports_a_truncated_url(
    s3_put: Any, storage_options: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    data = safetensors_bytes(_tensors())
    url = s3_put("cut.safetensors", data[:-100])
    assert main(["verify", url, "-q", *_flags(storage_options)]) == 2
    assert url in capsys.readouterr().err


def test_diff_a_url_with_a_local_file(
    tmp_path: Path, s3_put: Any, storage_options: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    tensors = _tensors()
    url = s3_put("a.safetensors", safetensors_bytes(tensors))
    changed = dict(tensors, **{"enc.bias": tensors["enc.bias"] + 1})
    local = tmp_path / "b.safetensors"
    local.write_bytes(safetensors_bytes(changed))
    assert main(["diff", url, str(local), "--json", "-q", *_flags(storage_options)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in report["values_differ"]] == ["enc.bias"]


def test_convert_a_url_to_a_local_file(
    tmp_path: Path, s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    url = s3_put("model.safetensors", safetensors_bytes(tensors))
    target = tmp_path / "model.bpk"
    counter.reset()
    assert main(["convert", url, str(target), "-q", *_flags(storage_options)]) == 0
    # Each open of SRC is its first range (the detection's is shared with the next open);
    # the tensors then come in one planned batch.
    data_requests = [r for r in counter.gets if r.start != 0]
    assert len(data_requests) == 1 and all(r.end == HEAD for r in counter.gets if r.start == 0)
    out = tmp_path / "back.safetensors"
    assert main(["convert", str(target), str(out), "-q"]) == 0
    back = safetensors_numpy.load_file(str(out))
    for name, array in tensors.items():
        np.testing.assert_array_equal(back[name], array)


def test_a_bad_storage_option_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "s3://bucket/m.safetensors", "--storage-option", "novalue"]) == 2
    assert "--storage-option takes KEY=VALUE" in capsys.readouterr().err


def test_a_missing_url_is_one_error_line(
    s3_bucket: str, storage_options: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{s3_bucket}/missing.safetensors"
    assert main(["inspect", url, *_flags(storage_options)]) == 2
    assert f"{url}: does not exist" in capsys.readouterr().err
