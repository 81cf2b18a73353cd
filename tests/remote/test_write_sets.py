"""Sharded sets saved to a folder of objects (``s3://bucket/prefix/``): the Hugging Face layout,
shards uploaded first and the index last as the commit, fresh shard names on every re-save,
superseded shards deleted after the commit, and the leftovers of a killed save (uncommitted
shards, incomplete uploads) removed by the next save.

S3 is moto on loopback (`conftest.py`); sets are read back by hand with s3fs and the
safetensors package (index, then each shard's tensors and set id), independent of weightstore's
own reading, and once more through the store.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from weightstore import SafetensorsStore, load_from
from weightstore.entry import TensorEntry
from weightstore.errors import DestinationExistsError
from weightstore.safetensors import FORMAT
from weightstore.sets import SET_ID_KEY, layout_for, plan_set, write_shard

pytest.importorskip("fsspec")
s3fs = pytest.importorskip("s3fs")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

LAYOUT = layout_for("safetensors")
INDEX = LAYOUT.index_name()
TENSORS, SHAPE = 6, (64, 256)  # 64 KiB each
TENSOR_SIZE = SHAPE[0] * SHAPE[1] * 4
THREE_SHARDS = 2 * TENSOR_SIZE  # bytes per shard: two tensors each


def _model(version: int) -> dict[str, dict[str, np.ndarray[Any, Any]]]:
    """A model whose every value says which version it is."""
    return {
        f"layer{i}": {"weight": np.full(SHAPE, version * 100 + i, np.float32)}
        for i in range(TENSORS)
    }


def _fs(options: dict[str, Any]) -> Any:
    """The test's filesystem with its cached listings dropped: sees the bucket as it is now."""
    fs = s3fs.S3FileSystem(**options)
    fs.invalidate_cache()
    return fs


def _names(options: dict[str, Any], folder: str) -> list[str]:
    fs = _fs(options)
    return sorted(path.rsplit("/", 1)[1] for path in fs.ls(folder, detail=False))


def _shard_metadata(data: bytes) -> dict[str, str]:
    (size,) = struct.unpack("<Q", data[:8])
    header: dict[str, Any] = json.loads(data[8 : 8 + size])
    metadata: dict[str, str] = header.get("__metadata__", {})
    return metadata


def _load_set(options: dict[str, Any], folder: str) -> tuple[int, int]:
    """The version the set in `folder` holds and its shard count, read as a set reader must:
    every tensor from the shard the index names, every shard's set id the index's. Fails on
    a mix of versions or a missing tensor."""
    fs = _fs(options)
    index = json.loads(fs.cat_file(f"{folder}/{INDEX}"))
    set_id = index["metadata"][SET_ID_KEY]
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    for shard in sorted(set(index["weight_map"].values())):
        data = fs.cat_file(f"{folder}/{shard}")
        assert _shard_metadata(data)[SET_ID_KEY] == set_id, f"{shard} is another save's"
        loaded = safetensors_numpy.load(data)
        tensors.update({k: v for k, v in loaded.items() if index["weight_map"][k] == shard})
    assert sorted(tensors) == [f"layer{i}.weight" for i in range(TENSORS)]
    versions = {int(v.flat[0]) // 100 for v in tensors.values()}
    assert len(versions) == 1, f"a mix of versions {sorted(versions)}"
    (version,) = versions
    for name, value in _model(version).items():
        np.testing.assert_array_equal(tensors[f"{name}.weight"], value["weight"])
    return version, len(set(index["weight_map"].values()))


def _pending_uploads(options: dict[str, Any], bucket: str) -> list[str]:
    listing = _fs(options).call_s3("list_multipart_uploads", Bucket=bucket.removeprefix("s3://"))
    return sorted(upload["Key"] for upload in listing.get("Uploads", []))


@pytest.fixture
def uploads_counted(counter: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`counter`, also seeing the requests made through s3fs's synchronous ``call_s3`` (which
    its files' uploads use, and which was bound to the unwrapped method at import)."""
    from fsspec.asyn import sync_wrapper

    monkeypatch.setattr(s3fs.S3FileSystem, "call_s3", sync_wrapper(s3fs.S3FileSystem._call_s3))
    return counter


def _store(url: str, options: dict[str, Any]) -> SafetensorsStore:
    return SafetensorsStore.from_file(url, storage_options=options).with_max_shard_size(
        THREE_SHARDS
    )


# -- the layout and re-saves -------------------------------------------------------------------


def test_a_set_is_saved_in_the_hugging_face_layout(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    folder = f"{s3_bucket}/ckpt"

    written = _store(f"{folder}/", storage_options).collect_from(_model(1))

    assert written == f"{folder}/{INDEX}"
    assert _names(storage_options, folder) == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        INDEX,
    ]
    index = json.loads(_fs(storage_options).cat_file(f"{folder}/{INDEX}"))
    assert index["metadata"]["total_size"] == TENSORS * TENSOR_SIZE
    assert index["weight_map"]["layer0.weight"] == "model-00001-of-00003.safetensors"
    assert _load_set(storage_options, folder) == (1, 3)


def test_a_resave_takes_fresh_names_and_deletes_the_old_shards_after_the_commit(
    s3_bucket: str, storage_options: dict[str, Any], uploads_counted: Any
) -> None:
    counter = uploads_counted
    folder = f"{s3_bucket}/ckpt"
    store = _store(folder, storage_options).overwrite()
    store.collect_from(_model(1))
    counter.reset()

    store.collect_from(_model(2))
    counted = counter.count

    names = _names(storage_options, folder)
    index = json.loads(_fs(storage_options).cat_file(f"{folder}/{INDEX}"))
    tag = index["metadata"][SET_ID_KEY][:8]
    assert names == [f"model-0000{n}-of-00003.{tag}.safetensors" for n in (1, 2, 3)] + [INDEX]
    assert _load_set(storage_options, folder) == (2, 3)
    # The order that makes a kill harmless: every shard uploaded, then the index, then deletes.
    steps = [
        "index" if r.key.endswith(INDEX) else "shard" if r.key else "delete"
        for r in counter.requests
        if r.method in {"complete_multipart_upload", "delete_objects"}
    ]
    assert steps == ["shard", "shard", "shard", "index", "delete"]
    # 20 requests: list the killed saves' uploads, read the index, list the folder; per shard
    # a check that its name is free and a 3-request upload; the index; list and delete.
    assert counted == 20

    store.collect_from(_model(3))  # the plain names are free again
    assert _names(storage_options, folder)[0] == "model-00001-of-00003.safetensors"
    assert _load_set(storage_options, folder) == (3, 3)
    assert _pending_uploads(storage_options, s3_bucket) == []


def test_a_set_that_fits_one_shard_replaces_the_sharded_one(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    folder = f"{s3_bucket}/ckpt"
    _store(folder, storage_options).collect_from(_model(1))

    store = SafetensorsStore.from_file(f"{folder}/", storage_options=storage_options)
    assert store.overwrite().collect_from(_model(2)) == f"{folder}/model.safetensors"

    assert _names(storage_options, folder) == ["model.safetensors"]  # old index and shards gone
    loaded = safetensors_numpy.load(_fs(storage_options).cat_file(f"{folder}/model.safetensors"))
    np.testing.assert_array_equal(loaded["layer5.weight"], _model(2)["layer5"]["weight"])


def test_a_committed_set_is_kept_unless_overwrite(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    folder = f"{s3_bucket}/ckpt"
    _store(folder, storage_options).collect_from(_model(1))

    with pytest.raises(DestinationExistsError) as caught:
        _store(folder, storage_options).collect_from(_model(2))

    assert caught.value.path == f"{folder}/{INDEX}"
    assert _load_set(storage_options, folder) == (1, 3)


def test_the_set_loads_back_through_the_store(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    folder = f"{s3_bucket}/ckpt"
    _store(folder, storage_options).collect_from(_model(4))

    model = _model(0)
    result = load_from(model, SafetensorsStore.from_file(folder, storage_options=storage_options))

    assert len(result.applied) == TENSORS
    np.testing.assert_array_equal(model["layer3"]["weight"], _model(4)["layer3"]["weight"])


# -- failures and kills ----------------------------------------------------------------------------


def test_a_save_failing_just_before_the_index_upload_leaves_the_old_set(
    s3_bucket: str, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import weightstore.sets._writer as writer

    folder = f"{s3_bucket}/ckpt"
    store = _store(folder, storage_options).overwrite()
    store.collect_from(_model(1))
    before = _names(storage_options, folder)

    def no_index(*args: Any) -> bytes:  # every new shard is uploaded by now
        assert len(_names(storage_options, folder)) == len(before) + 3
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "_index_json", no_index)
    with pytest.raises(KeyboardInterrupt):
        store.collect_from(_model(2))

    assert _load_set(storage_options, folder) == (1, 3)
    assert _names(storage_options, folder) == before  # the new, uncommitted shards removed
    assert _pending_uploads(storage_options, s3_bucket) == []


def test_an_index_upload_failing_midway_leaves_the_old_index(
    s3_bucket: str, storage_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import weightstore.sets._writer as writer

    folder = f"{s3_bucket}/ckpt"
    store = _store(folder, storage_options).overwrite()
    store.collect_from(_model(1))

    def half_then_fail(data: bytes) -> Callable[[BinaryIO], None]:
        def write(file: BinaryIO) -> None:
            file.write(data[: len(data) // 2])
            raise OSError("the connection dropped")

        return write

    monkeypatch.setattr(writer, "_write_bytes", half_then_fail)
    with pytest.raises(OSError, match="the connection dropped"):
        store.collect_from(_model(2))

    assert _load_set(storage_options, folder) == (1, 3)
    assert _pending_uploads(storage_options, s3_bucket) == []


def test_the_next_save_removes_what_a_killed_save_left(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    folder = f"{s3_bucket}/ckpt"
    _store(folder, storage_options).collect_from(_model(1))
    fs = _fs(storage_options)
    fs.pipe_file(f"{folder}/README.md", b"not a shard")  # never ours to remove
    fs.pipe_file(f"{folder}/model.fp16-00001-of-00002.safetensors", b"another variant's")
    # What a save killed before its commit leaves: a whole uncommitted shard, and an upload
    # that was never completed (invisible, but stored).
    plan = plan_set(folder, LAYOUT, 2, overwrite=True, storage_options=storage_options)
    entry = TensorEntry.from_array("x", np.zeros(4, np.float32))
    write_shard(
        plan, 1, [entry], FORMAT, metadata={}, durable=True, storage_options=storage_options
    )
    bucket, key = fs.split_path(plan.shard_path(2))[:2]
    fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
    assert _pending_uploads(storage_options, s3_bucket) == [key]

    _store(folder, storage_options).overwrite().collect_from(_model(2))

    assert _load_set(storage_options, folder) == (2, 3)
    names = _names(storage_options, folder)
    assert plan.shard_names[0] not in names
    assert {"README.md", "model.fp16-00001-of-00002.safetensors"} <= set(names)
    assert len(names) == 3 + 1 + 2
    assert _pending_uploads(storage_options, s3_bucket) == []


# -- other folders ---------------------------------------------------------------------------------


def test_a_memory_folder_takes_the_same_protocol(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    folder = f"memory://ws-sets-{tmp_path.name}"
    try:
        store = SafetensorsStore.from_file(folder).with_max_shard_size(THREE_SHARDS).overwrite()
        store.collect_from(_model(1))
        store.collect_from(_model(2))
        names = sorted(p.rsplit("/", 1)[1] for p in fs.ls(folder, detail=False))
        index = json.loads(fs.cat_file(f"{folder}/{INDEX}"))
        assert names == sorted({*index["weight_map"].values(), INDEX})
        assert all(".tmp" not in name for name in names)
        shard = fs.cat_file(f"{folder}/{index['weight_map']['layer4.weight']}")
        np.testing.assert_array_equal(
            safetensors_numpy.load(shard)["layer4.weight"], _model(2)["layer4"]["weight"]
        )
    finally:
        if fs.exists(folder):
            fs.rm(folder, recursive=True)


def test_the_cli_converts_into_an_s3_set(
    tmp_path: Path,
    s3_bucket: str,
    s3_endpoint: str,
    storage_options: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from weightstore.cli import main

    source = tmp_path / "model.safetensors"
    SafetensorsStore.from_file(source).collect_from(_model(5))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)  # how boto finds the CLI's S3 API
    s3fs.S3FileSystem.clear_instance_cache()

    folder = f"{s3_bucket}/converted"
    argv = ["convert", str(source), folder, "--max-shard-size", str(THREE_SHARDS), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err

    assert _load_set(storage_options, folder) == (5, 3)
