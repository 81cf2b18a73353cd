"""Every format read from a URL as from a local file: the same values, the same validation, and
only the bytes needed. torch and the safetensors package are the oracles."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.remote.conftest import (
    Counter,
    HttpServer,
    burnpack_bytes,
    safetensors_bytes,
)
from weightstore import open_reader
from weightstore.burnpack import BurnpackReader
from weightstore.errors import (
    FileMissingError,
    HeaderError,
    TruncatedError,
    UnsupportedFormatError,
)
from weightstore.pytorch_reader import PytorchReader
from weightstore.safetensors import SafetensorsReader

# URLs need the remote extra; the oracles are torch and the safetensors package.
need("fsspec")
torch = need("torch")
safetensors_numpy = need("safetensors.numpy")

HEAD = 64 * 1024


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "embed.weight": rng.standard_normal((512, 256)).astype(np.float32),
        "fc.weight": rng.standard_normal((256, 256)).astype(np.float32),
        "fc.bias": rng.standard_normal(256).astype(np.float32),
        "norm.weight": rng.standard_normal(256).astype(np.float16),
        "steps": np.arange(10, dtype=np.int64),
    }


def _state_dict() -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(array.copy()) for name, array in _tensors().items()}


def _pt_bytes(**options: Any) -> bytes:
    buffer = io.BytesIO()
    state = _state_dict()
    state["tied"] = state["fc.weight"]  # one storage, two names
    state["view"] = state["embed.weight"][10:20, ::2]  # an offset, strided view
    torch.save(state, buffer, **options)
    return buffer.getvalue()


def test_burnpack_reads_the_same_from_s3(
    s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    url = s3_put("model.bpk", burnpack_bytes(tensors))
    counter.reset()
    with BurnpackReader.from_file(url, storage_options=storage_options) as pack:
        assert counter.count == 1
        assert sorted(pack.names()) == sorted(tensors)
        for name, array in tensors.items():
            np.testing.assert_array_equal(pack.get(name), array)
    needed = sum(a.nbytes for a in tensors.values())
    assert counter.nbytes <= HEAD + 1.01 * needed


def test_burnpack_extension_rule_applies_to_urls(s3_put: Any, storage_options: dict) -> None:
    s3_put("model.bpk", burnpack_bytes(_tensors()))
    url = s3_put("model.bpk", burnpack_bytes(_tensors())).removesuffix(".bpk")
    with BurnpackReader.from_file(url, storage_options=storage_options) as pack:
        assert pack.path == url + ".bpk"


def test_a_truncated_burnpack_fails_as_locally(s3_put: Any, storage_options: dict) -> None:
    data = burnpack_bytes(_tensors())
    url = s3_put("cut.bpk", data[: len(data) // 2])
    with pytest.raises(TruncatedError) as caught:
        BurnpackReader.from_file(url, storage_options=storage_options)
    assert caught.value.path == url
    url = s3_put("tiny.bpk", b"NRUB")
    with pytest.raises(HeaderError):
        BurnpackReader.from_file(url, storage_options=storage_options)


def test_a_pytorch_zip_reads_by_range(s3_put: Any, storage_options: dict, counter: Counter) -> None:
    data = _pt_bytes()
    url = s3_put("model.pt", data)
    oracle = torch.load(io.BytesIO(data), weights_only=True)
    counter.reset()
    with PytorchReader.from_file(url, storage_options=storage_options) as reader:
        assert counter.count == 2  # the head (data.pkl), the tail (directory and records)
        assert (counter.gets[0].start, counter.gets[0].end) == (0, HEAD)
        assert counter.gets[1].end == len(data)
        assert sorted(reader.names()) == sorted(oracle)
        counter.reset()
        for name, tensor in oracle.items():
            np.testing.assert_array_equal(reader.get(name), tensor.numpy())
    storages = {id(t.untyped_storage()): t.untyped_storage().nbytes() for t in oracle.values()}
    # Each storage once per tensor viewing it, with its local header: no other bytes.
    per_tensor = sum(t.untyped_storage().nbytes() for t in oracle.values())
    assert counter.nbytes <= per_tensor + len(oracle) * 256
    assert len(storages) == len(oracle) - 2  # the tie and the view share storages


def test_a_pytorch_zip_reads_over_http(http_server: HttpServer) -> None:
    data = _pt_bytes()
    (http_server.root / "model.pt").write_bytes(data)
    oracle = torch.load(io.BytesIO(data), weights_only=True)
    with open_reader(http_server.url("model.pt")) as reader:
        for name, tensor in oracle.items():
            np.testing.assert_array_equal(reader.get(name), tensor.numpy())
    assert all(r.start is not None for r in http_server.requests)  # every GET a range
    # A storage viewed by several tensors is fetched for each (a URL's storages are not kept).
    per_tensor = sum(t.untyped_storage().nbytes() for t in oracle.values())
    assert http_server.nbytes <= 2 * HEAD + per_tensor + len(oracle) * 256


def test_a_legacy_pytorch_file_at_a_url_asks_for_a_download(
    s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    url = s3_put("old.pt", _pt_bytes(_use_new_zipfile_serialization=False))
    counter.reset()
    with pytest.raises(UnsupportedFormatError, match="download it") as caught:
        PytorchReader.from_file(url, storage_options=storage_options)
    assert caught.value.path == url and counter.count == 1


def test_a_local_legacy_file_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.pt"
    path.write_bytes(_pt_bytes(_use_new_zipfile_serialization=False))
    with PytorchReader.from_file(path) as reader:
        np.testing.assert_array_equal(reader.get("fc.bias"), _tensors()["fc.bias"])


@pytest.mark.parametrize("name", ["model.safetensors", "model.bpk", "model.pt", "model.bin"])
def test_open_reader_tells_every_format_at_a_url_in_one_request(
    name: str, s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    data = {
        "model.safetensors": safetensors_bytes(tensors),
        "model.bpk": burnpack_bytes(tensors),
        "model.pt": _pt_bytes(),
        "model.bin": safetensors_bytes(tensors),  # the extension says nothing
    }[name]
    url = s3_put(name, data)
    counter.reset()
    with open_reader(url, storage_options=storage_options) as reader:
        opened = counter.count
        np.testing.assert_array_equal(reader.get("fc.weight"), tensors["fc.weight"])
    assert opened == (2 if name == "model.pt" else 1)  # the probe's request is the reader's


def test_safetensors_at_a_url_matches_the_package(http_server: HttpServer) -> None:
    tensors = _tensors()
    path = http_server.root / "m.safetensors"
    path.write_bytes(safetensors_bytes(tensors))
    oracle = safetensors_numpy.load_file(str(path))
    with SafetensorsReader.from_file(http_server.url("m.safetensors")) as reader:
        assert reader.names() == sorted(oracle)
        for name, array in oracle.items():
            np.testing.assert_array_equal(reader.get(name), array)


def test_a_missing_pytorch_url_is_a_missing_file(s3_bucket: str, storage_options: dict) -> None:
    with pytest.raises(FileMissingError):
        PytorchReader.from_file(f"{s3_bucket}/none.pt", storage_options=storage_options)
