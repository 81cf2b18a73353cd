"""Loads from URLs through stores: full, filtered, tensor-parallel and sharded-set loads fetch
what they need (plus the 64 KiB head), in merged, concurrent requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.remote.conftest import (
    Counter,
    HttpServer,
    burnpack_bytes,
    read_options,
    safetensors_bytes,
)
from weightstore import BurnpackStore, SafetensorsStore, Store, distributed, save_into
from weightstore.errors import SetError

# URLs need the remote extra; the oracles are torch and the safetensors package.
need("fsspec")
torch = need("torch")
safetensors_numpy = need("safetensors.numpy")

HEAD = 64 * 1024


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    tensors = {f"layers.{i}.weight": rng.standard_normal((128, 256)) for i in range(8)}
    tensors |= {f"layers.{i}.bias": rng.standard_normal(128) for i in range(8)}
    tensors["embed.weight"] = rng.standard_normal((64, 256))
    return {name: array.astype(np.float32) for name, array in tensors.items()}


def _empty(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.zeros_like(array) for name, array in tensors.items()}


def _within(counter: Counter, needed: int) -> None:
    """The load's bound: the bytes needed (1 % of gaps allowed) plus the head."""
    assert counter.nbytes <= HEAD + 1.01 * needed, (counter.nbytes, needed)


def test_store_from_file_detects_and_opens_with_one_request(
    s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    url = s3_put("model.bin", safetensors_bytes(_tensors()))  # the bytes, not the name, tell
    counter.reset()
    store = Store.from_file(url, storage_options=storage_options)
    assert isinstance(store, SafetensorsStore)
    assert "layers.3.bias" in store
    assert counter.count == 1


@pytest.mark.parametrize("save", [safetensors_bytes, burnpack_bytes], ids=["st", "bpk"])
def test_a_full_load_fetches_the_file_once_in_few_requests(
    save: Any, s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    data = save(tensors)
    url = s3_put("model", data)
    model = _empty(tensors)
    counter.reset()
    result = Store.from_file(url, storage_options=storage_options).apply_to(model)
    assert result.is_success()
    for name, array in tensors.items():
        np.testing.assert_array_equal(model[name], array)
    _within(counter, sum(a.nbytes for a in tensors.values()))
    assert counter.count <= 3  # the head, then the rest in one window of concurrent blocks


def test_a_filtered_load_fetches_only_the_kept_tensors(
    s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    url = s3_put("m.safetensors", safetensors_bytes(tensors))
    model = _empty(tensors)
    counter.reset()
    store = SafetensorsStore.from_file(url, storage_options=storage_options)
    store.with_regex(r"^layers\.[25]\.").allow_partial().apply_to(model)
    kept = [name for name in tensors if name.startswith(("layers.2.", "layers.5."))]
    for name in kept:
        np.testing.assert_array_equal(model[name], tensors[name])
    assert not model["layers.3.weight"].any()
    _within(counter, sum(tensors[name].nbytes for name in kept))


def test_a_tensor_parallel_slice_fetches_only_its_bytes(
    s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    url = s3_put("m.safetensors", safetensors_bytes(tensors))
    plan = {r"^layers\.\d\.weight$": 0, r"^embed\.weight$": 1}
    rank, world = 1, 4
    model = {}
    for name, array in tensors.items():
        if name.startswith("layers.") and name.endswith("weight"):
            model[name] = np.zeros((32, 256), np.float32)
        elif name == "embed.weight":
            model[name] = np.zeros((64, 64), np.float32)
        else:
            model[name] = np.zeros_like(array)
    store = SafetensorsStore.from_file(url, storage_options=storage_options)
    counter.reset()
    distributed.load(store, model, plan, rank=rank, world_size=world)
    np.testing.assert_array_equal(model["layers.4.weight"], tensors["layers.4.weight"][32:64])
    np.testing.assert_array_equal(model["embed.weight"], tensors["embed.weight"][:, 64:128])
    np.testing.assert_array_equal(model["layers.4.bias"], tensors["layers.4.bias"])
    _within(counter, sum(array.nbytes for array in model.values()))


def test_a_torch_model_loads_from_a_url(
    http_server: HttpServer,
) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    weights = {name: torch.randn_like(value) for name, value in model.state_dict().items()}
    path = http_server.root / "model.safetensors"
    path.write_bytes(safetensors_bytes({k: v.numpy() for k, v in weights.items()}))
    result = SafetensorsStore.from_file(http_server.url("model.safetensors")).apply_to(model)
    assert result.is_success()
    oracle = safetensors_numpy.load_file(str(path))
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), oracle[name])


def test_a_load_keeps_requests_in_flight_up_to_the_limit(
    s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    url = s3_put("m.safetensors", safetensors_bytes(tensors))
    options = read_options(storage_options, block_size=32 * 1024, max_concurrency=4)
    model = _empty(tensors)
    counter.reset()
    counter.delay = 0.01
    SafetensorsStore.from_file(url, storage_options=options).apply_to(model)
    assert counter.in_flight_max == 4
    assert all(r.end - r.start <= 32 * 1024 for r in counter.gets[1:])
    _within(counter, sum(a.nbytes for a in tensors.values()))
    np.testing.assert_array_equal(model["layers.7.weight"], tensors["layers.7.weight"])


def test_a_window_holds_no_more_than_its_budget(
    s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    """Each planned batch reads at most block_size x max_concurrency bytes ahead."""
    tensors = _tensors()
    url = s3_put("m.safetensors", safetensors_bytes(tensors))
    options = read_options(storage_options, block_size=64 * 1024, max_concurrency=2)
    model = _empty(tensors)
    counter.reset()
    SafetensorsStore.from_file(url, storage_options=options).apply_to(model)
    assert all(r.end - r.start <= 64 * 1024 for r in counter.gets)
    assert counter.count >= sum(a.nbytes for a in tensors.values()) // (64 * 1024)
    _within(counter, sum(a.nbytes for a in tensors.values()))


# -- sharded sets -------------------------------------------------------------------------------


def _upload_set(tmp_path: Path, s3_put: Any, tensors: dict[str, np.ndarray]) -> str:
    folder = tmp_path / "set"
    save_into(dict(tensors), SafetensorsStore.from_file(folder).with_max_shard_size(300_000))
    for file in sorted(folder.iterdir()):
        url = s3_put(f"set/{file.name}", file.read_bytes())
    return url.rsplit("/", 1)[0]


def test_a_set_loads_from_its_folder_and_its_index(
    tmp_path: Path, s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    folder = _upload_set(tmp_path, s3_put, tensors)
    for url in (folder, f"{folder}/model.safetensors.index.json"):
        store = Store.from_file(url, storage_options=storage_options)
        assert isinstance(store, SafetensorsStore)
        model = _empty(tensors)
        counter.reset()
        assert store.apply_to(model).is_success()
        for name, array in tensors.items():
            np.testing.assert_array_equal(model[name], array)
        shards = {r.key for r in counter.gets} - {"set/model.safetensors.index.json"}
        assert len(shards) == 5  # 5 shards of at most 300,000 bytes
        _within(counter, sum(a.nbytes for a in tensors.values()) + len(shards) * HEAD)


def test_a_filtered_set_load_opens_only_the_shards_it_needs(
    tmp_path: Path, s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    tensors = _tensors()
    folder = _upload_set(tmp_path, s3_put, tensors)
    index = f"{folder}/model.safetensors.index.json"
    model = _empty(tensors)
    counter.reset()
    store = SafetensorsStore.from_file(index, storage_options=storage_options)
    store.with_full_path("layers.0.weight").allow_partial().apply_to(model)
    np.testing.assert_array_equal(model["layers.0.weight"], tensors["layers.0.weight"])
    keys = {r.key for r in counter.gets}
    assert len(keys - {"set/model.safetensors.index.json"}) == 1  # one shard opened


def test_a_set_over_http_opens_by_its_index(tmp_path: Path, http_server: HttpServer) -> None:
    tensors = _tensors()
    folder = http_server.root / "set"
    save_into(dict(tensors), SafetensorsStore.from_file(folder).with_max_shard_size(300_000))
    store = Store.from_file(http_server.url("set/model.safetensors.index.json"))
    model = _empty(tensors)
    assert store.apply_to(model).is_success()
    np.testing.assert_array_equal(model["embed.weight"], tensors["embed.weight"])


def test_a_hugging_face_set_at_a_url_loads(
    tmp_path: Path, s3_put: Any, storage_options: dict
) -> None:
    hub = pytest.importorskip("huggingface_hub")
    tensors = _tensors()
    local = tmp_path / "hf"
    local.mkdir()
    state = {name: torch.from_numpy(array) for name, array in tensors.items()}
    hub.save_torch_state_dict(state, local, max_shard_size="300KB")
    for file in local.iterdir():
        s3_put(f"hf/{file.name}", file.read_bytes())
    bucket = s3_put("hf/README", b"").rsplit("/", 2)[0]
    model = _empty(tensors)
    store = Store.from_file(f"{bucket}/hf", storage_options=storage_options)
    assert store.apply_to(model).is_success()
    for name, array in tensors.items():
        np.testing.assert_array_equal(model[name], array)


def test_a_set_missing_a_shard_fails_at_open(
    tmp_path: Path, s3_put: Any, storage_options: dict
) -> None:
    tensors = _tensors()
    folder = _upload_set(tmp_path, s3_put, tensors)
    import s3fs

    fs = s3fs.S3FileSystem(**storage_options, skip_instance_cache=True)
    fs.rm_file(f"{folder}/model-00002-of-00005.safetensors")
    with pytest.raises(SetError, match="does not exist") as caught:
        SafetensorsStore.from_file(
            f"{folder}/model.safetensors.index.json", storage_options=storage_options
        ).keys()
    assert caught.value.shard == "model-00002-of-00005.safetensors"


def test_a_burnpack_store_reads_its_url_without_extension(
    s3_put: Any, storage_options: dict
) -> None:
    tensors = _tensors()
    url = s3_put("model.bpk", burnpack_bytes(tensors)).removesuffix(".bpk")
    model = _empty(tensors)
    assert BurnpackStore.from_file(url, storage_options=storage_options).apply_to(model)
    np.testing.assert_array_equal(model["embed.weight"], tensors["embed.weight"])


def test_a_larger_gap_ratio_reads_column_slices_as_whole_rows(
    s3_put: Any, storage_options: dict, counter: Counter
) -> None:
    """A split on dim 1 is one range per row; gap_ratio=3 lets a rank of four read its
    quarter of each row within whole rows: four times the bytes, a few requests."""
    tensors = _tensors()
    url = s3_put("m.safetensors", safetensors_bytes(tensors))
    model = {name: np.zeros_like(array) for name, array in tensors.items()}
    model["layers.0.weight"] = np.zeros((128, 64), np.float32)
    plan = {r"^layers\.0\.weight$": 1}
    for ratio, requests in ((0.01, 128), (3, 1)):
        options = read_options(storage_options, gap_ratio=ratio)
        store = SafetensorsStore.from_file(url, storage_options=options)
        counter.reset()
        distributed.load(store.with_full_path("layers.0.weight").allow_partial(), model, plan,
                         rank=2, world_size=4)  # fmt: skip
        expected = tensors["layers.0.weight"][:, 128:192]
        np.testing.assert_array_equal(model["layers.0.weight"], expected)
        slices = [r for r in counter.gets if r.start != 0]
        assert len(slices) == requests
        assert sum(r.nbytes for r in slices) <= (1 + ratio) * expected.nbytes


def _forty() -> dict[str, np.ndarray]:
    """40 tensors of 1 MiB, as in the report of the bug this guards against."""
    rng = np.random.default_rng(5)
    return {f"layers.{i}.weight": rng.standard_normal((512, 512), np.float32) for i in range(40)}


@pytest.mark.parametrize("layout", ["file", "set", "pt"])
def test_a_model_holding_one_tensor_fetches_only_that_tensor(
    layout: str, http_server: HttpServer
) -> None:
    """No filter: the load's reads come from matching the model, so a model holding one of
    40 tensors fetches that one (plus the headers), not the file."""
    tensors = _forty()
    if layout == "file":
        (http_server.root / "m.safetensors").write_bytes(safetensors_bytes(tensors))
        url, heads = http_server.url("m.safetensors"), HEAD
    elif layout == "set":
        folder = http_server.root / "set"
        save_into(dict(tensors), SafetensorsStore.from_file(folder).with_max_shard_size(8 << 20))
        url, heads = http_server.url("set/model.safetensors.index.json"), 6 * HEAD
    else:
        torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, http_server.root / "m.pt")
        url, heads = http_server.url("m.pt"), 3 * HEAD  # directory, pickle, local headers
    wanted = "layers.17.weight"
    model = {wanted: np.zeros((512, 512), np.float32)}
    http_server.requests.clear()
    store = Store.from_file(url).allow_partial(True)
    if layout == "pt":  # PyTorch's default renumbers list indices: layers.17 would take 0's
        store = store.map_indices_contiguous(False)
    result = store.apply_to(model)
    assert result.is_success() and result.applied == [wanted]
    np.testing.assert_array_equal(model[wanted], tensors[wanted])
    needed = tensors[wanted].nbytes
    assert http_server.nbytes <= heads + 1.01 * needed, (http_server.nbytes, needed)
    print(f"{layout}: {http_server.nbytes:,} bytes transferred for a {needed:,}-byte tensor "
          f"of a {sum(a.nbytes for a in tensors.values()):,}-byte model")  # fmt: skip
