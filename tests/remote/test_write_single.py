"""Saving one file to a URL (`weightstore.io._remote_write`, through `write_atomic` and the stores):
the object streams into an upload that becomes the object only when the save completes, so it
is absent (or keeps its old bytes) until then and after any failure, and no upload is left.

S3 is moto on loopback (`conftest.py`); ``memory://`` runs the scratch-and-move way, and an
``http://`` server shows a filesystem that cannot write. Objects are read back with s3fs and
the safetensors package, independent of weightstore's own reading.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from weightstore import BurnpackStore, SafetensorsStore
from weightstore.dtypes import from_numpy
from weightstore.errors import DestinationExistsError, SaveFailedError
from weightstore.io._atomic import write_atomic
from weightstore.snapshot import TensorSnapshot

pytest.importorskip("fsspec")
s3fs = pytest.importorskip("s3fs")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

PART_SIZE = 5 * 2**20  # S3's smallest part: parts are sent while the save is still running
TENSOR_SHAPE = (512, 1024)  # float32: 2 MiB a tensor


@pytest.fixture
def options(storage_options: dict[str, Any]) -> dict[str, Any]:
    """The loopback S3 API with 5 MiB parts, so a 12 MiB save uploads parts as it goes."""
    return {**storage_options, "default_block_size": PART_SIZE}


@pytest.fixture
def client(s3_endpoint: str) -> Any:
    """A boto3 client: looks at the bucket without s3fs's caches."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="x",
        aws_secret_access_key="x",
        region_name="us-east-1",
    )


@pytest.fixture
def memory_root() -> Iterator[str]:
    """A fresh folder of the process-wide ``memory://`` filesystem."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = f"/ws-{uuid.uuid4().hex}"
    yield root
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture
def uploads_counted(counter: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`counter`, also seeing the requests made through s3fs's synchronous ``call_s3`` (which
    its files' uploads use, and which was bound to the unwrapped method at import)."""
    from fsspec.asyn import sync_wrapper

    monkeypatch.setattr(s3fs.S3FileSystem, "call_s3", sync_wrapper(s3fs.S3FileSystem._call_s3))
    return counter


def _tensor(index: int) -> np.ndarray[Any, Any]:
    return np.full(TENSOR_SHAPE, index, np.float32) + np.arange(TENSOR_SHAPE[1], dtype=np.float32)


def _snapshots(
    count: int, before_load: Callable[[int], None] | None = None
) -> list[TensorSnapshot]:
    """`count` tensors produced only when the writer asks, calling `before_load(i)` first."""

    def load(index: int) -> np.ndarray[Any, Any]:
        if before_load is not None:
            before_load(index)
        return _tensor(index)

    dtype = from_numpy(np.dtype(np.float32))
    return [
        TensorSnapshot(("layer", str(i), "weight"), dtype, TENSOR_SHAPE, functools.partial(load, i))
        for i in range(count)
    ]


def _read_object(options: dict[str, Any], url: str) -> dict[str, np.ndarray[Any, Any]]:
    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    loaded: dict[str, np.ndarray[Any, Any]] = safetensors_numpy.load(fs.cat_file(url))
    return loaded


def _key(url: str) -> tuple[str, str]:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


def _pending_uploads(client: Any, bucket: str) -> list[dict[str, Any]]:
    uploads: list[dict[str, Any]] = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return uploads


def _object_exists(client: Any, url: str) -> bool:
    bucket, key = _key(url)
    listing = client.list_objects_v2(Bucket=bucket, Prefix=key)
    return any(item["Key"] == key for item in listing.get("Contents", []))


# -- S3 --------------------------------------------------------------------------------------------


def test_a_store_saves_to_s3_and_the_bytes_are_a_safetensors_file(
    s3_bucket: str, options: dict[str, Any]
) -> None:
    url = f"{s3_bucket}/model.safetensors"
    store = SafetensorsStore.from_file(url, storage_options=options)

    assert store.collect_from(_snapshots(6)) == url

    loaded = _read_object(options, url)
    assert sorted(loaded) == [f"layer.{i}.weight" for i in range(6)]
    for i in range(6):
        np.testing.assert_array_equal(loaded[f"layer.{i}.weight"], _tensor(i))


def test_the_object_is_absent_while_its_parts_are_uploaded(
    s3_bucket: str, options: dict[str, Any], client: Any
) -> None:
    url = f"{s3_bucket}/model.safetensors"
    bucket, key = _key(url)
    seen: list[tuple[bool, int]] = []

    def look(index: int) -> None:  # runs inside the save, before tensor `index` is produced
        if index == 5:
            uploads = _pending_uploads(client, bucket)
            parts = [
                part
                for upload in uploads
                for part in client.list_parts(
                    Bucket=bucket, Key=key, UploadId=upload["UploadId"]
                ).get("Parts", [])
            ]
            seen.append((_object_exists(client, url), len(parts)))

    SafetensorsStore.from_file(url, storage_options=options).collect_from(_snapshots(6, look))

    # Ten MiB were streamed before the sixth tensor existed: two 5 MiB parts sent, no object.
    assert seen == [(False, 2)]
    assert _object_exists(client, url)
    assert _pending_uploads(client, bucket) == []


@pytest.mark.parametrize("old", [None, b"the old object"], ids=["new", "replacing"])
def test_a_save_failing_midway_leaves_the_old_object_or_none_and_no_upload(
    s3_bucket: str, options: dict[str, Any], client: Any, old: bytes | None
) -> None:
    url = f"{s3_bucket}/model.safetensors"
    bucket, key = _key(url)
    if old is not None:
        client.put_object(Bucket=bucket, Key=key, Body=old)

    def fail(index: int) -> None:
        if index == 4:  # after 8 MiB: one part is already uploaded
            raise RuntimeError("the source went away")

    store = SafetensorsStore.from_file(url, storage_options=options).overwrite()
    with pytest.raises(RuntimeError, match="the source went away"):
        store.collect_from(_snapshots(6, fail))

    if old is None:
        assert not _object_exists(client, url)
    else:
        assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == old
    assert _pending_uploads(client, bucket) == []


def test_an_existing_object_is_kept_unless_overwrite(
    s3_bucket: str, options: dict[str, Any], client: Any
) -> None:
    url = f"{s3_bucket}/model.bpk"
    bucket, key = _key(url)
    client.put_object(Bucket=bucket, Key=key, Body=b"keep me")
    store = BurnpackStore.from_file(f"{s3_bucket}/model", storage_options=options)

    with pytest.raises(DestinationExistsError) as caught:
        store.collect_from(_snapshots(2))
    assert caught.value.path == url
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"keep me"

    assert store.overwrite().collect_from(_snapshots(2)) == url
    written = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert BurnpackStore.from_bytes(written).keys() == ["layer.0.weight", "layer.1.weight"]


def test_an_object_appearing_during_the_upload_is_not_replaced(
    s3_bucket: str, options: dict[str, Any], client: Any
) -> None:
    # Without overwrite, S3 completes the upload only if the key is still free (If-None-Match).
    url = f"{s3_bucket}/model.safetensors"
    bucket, key = _key(url)

    def race(index: int) -> None:
        if index == 3:
            client.put_object(Bucket=bucket, Key=key, Body=b"another writer's")

    store = SafetensorsStore.from_file(url, storage_options=options)
    with pytest.raises(DestinationExistsError):
        store.collect_from(_snapshots(6, race))

    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"another writer's"
    assert _pending_uploads(client, bucket) == []


def test_every_byte_is_sent_once_in_part_sized_writes(
    s3_bucket: str, options: dict[str, Any], uploads_counted: Any
) -> None:
    counter = uploads_counted
    url = f"{s3_bucket}/model.safetensors"
    store = SafetensorsStore.from_file(url, storage_options=options).overwrite()

    store.collect_from(_snapshots(6))

    # One listing (is the URL a set's folder?), then the upload: create, 3 parts, complete.
    assert counter.operations() == [
        "list_objects_v2",
        "create_multipart_upload",
        "upload_part",
        "upload_part",
        "upload_part",
        "complete_multipart_upload",
    ]
    parts = [r.nbytes for r in counter.requests if r.method == "upload_part"]
    size = len(s3fs.S3FileSystem(**options, skip_instance_cache=True).cat_file(url))
    assert parts == [PART_SIZE, PART_SIZE, size - 2 * PART_SIZE]  # every byte sent once


def test_a_store_error_names_the_url(s3_endpoint: str, options: dict[str, Any]) -> None:
    url = "s3://no-such-bucket-here/model.safetensors"
    store = SafetensorsStore.from_file(url, storage_options=options).overwrite()

    with pytest.raises(SaveFailedError) as caught:
        store.collect_from(_snapshots(1))

    assert caught.value.path == url
    assert str(caught.value).startswith(url)


def test_the_cli_converts_a_local_file_to_s3(
    tmp_path: Path,
    s3_bucket: str,
    s3_endpoint: str,
    storage_options: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from weightstore.cli import main

    source = tmp_path / "model.safetensors"
    SafetensorsStore.from_file(source).collect_from(_snapshots(3))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)  # how boto finds the CLI's S3 API
    s3fs.S3FileSystem.clear_instance_cache()

    target = f"{s3_bucket}/converted.bpk"
    assert main(["convert", str(source), target, "--quiet"]) == 0
    capsys.readouterr()

    fs = s3fs.S3FileSystem(**storage_options, skip_instance_cache=True)
    data = fs.cat_file(target)
    assert data[:4] == b"NRUB"
    back = BurnpackStore.from_bytes(data)
    assert sorted(back.keys()) == [f"layer.{i}.weight" for i in range(3)]


# -- other filesystems -----------------------------------------------------------------------------


def _writes(*chunks: bytes) -> Callable[[BinaryIO], None]:
    def write(file: BinaryIO) -> None:
        for chunk in chunks:
            file.write(chunk)

    return write


def test_memory_urls_take_the_scratch_and_move_way(memory_root: str) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    url = f"memory://{memory_root}/x.bin"

    assert write_atomic(url, _writes(b"hello ", b"world")) == url
    assert fs.cat_file(f"{memory_root}/x.bin") == b"hello world"

    with pytest.raises(DestinationExistsError):
        write_atomic(url, _writes(b"new"))

    def fail(file: BinaryIO) -> None:
        file.write(b"half")
        raise ValueError("stop")

    with pytest.raises(ValueError, match="stop"):
        write_atomic(url, fail, overwrite=True)
    assert fs.cat_file(f"{memory_root}/x.bin") == b"hello world"
    assert fs.ls(memory_root, detail=False) == [f"{memory_root}/x.bin"]  # no scratch left


def test_an_http_url_cannot_be_written(http_server: Any) -> None:
    url = http_server.url("model.safetensors")

    with pytest.raises(SaveFailedError) as caught:
        write_atomic(url, _writes(b"data"))

    assert caught.value.path == url
    assert "cannot write" in str(caught.value)
    assert not (http_server.root / "model.safetensors").exists()


# -- memory: the peak of a streamed save ---------------------------------------------------------

_PEAK_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from weightstore import SafetensorsStore
    from weightstore.dtypes import from_numpy
    from weightstore.snapshot import TensorSnapshot

    endpoint, url, part_size, count, tensor_size = sys.argv[1:6]
    part_size, count, tensor_size = int(part_size), int(count), int(tensor_size)
    options = {"endpoint_url": endpoint, "key": "x", "secret": "x",
               "default_block_size": part_size}

    def snapshots(n, size):
        dtype = from_numpy(np.dtype(np.uint8))
        return [TensorSnapshot(("t", str(i)), dtype, (size,),
                               lambda i=i: np.full(size, i, np.uint8)) for i in range(n)]

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

    store = SafetensorsStore.from_file(url, storage_options=options).overwrite()
    store.collect_from(snapshots(1, part_size + 1))  # warm up: imports, connections, one part
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak RSS starts again from here
    before = status("VmRSS")
    store.collect_from(snapshots(count, tensor_size))
    print(json.dumps({"before": before, "peak": status("VmHWM")}))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
@pytest.mark.parametrize("part_mib", [5, 16])
def test_a_streamed_save_holds_one_tensor_and_one_part(
    s3_bucket: str, s3_endpoint: str, part_mib: int, tmp_path: Path
) -> None:
    # 96 MiB in six 16 MiB tensors, produced one at a time as the writer asks.
    tensor_size, count, part_size = 16 * 2**20, 6, part_mib * 2**20
    url = f"{s3_bucket}/big.safetensors"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    args = [s3_endpoint, url, str(part_size), str(count), str(tensor_size)]
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_CHILD, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.splitlines()[-1])
    extra = figures["peak"] - figures["before"]
    (tmp_path / "peak.json").write_text(json.dumps({**figures, "extra": extra}))
    print(f"part {part_mib} MiB: peak extra {extra / 2**20:.1f} MiB")

    # One tensor, the part being filled, and the copy of it the request sends, plus slack for
    # the HTTP stack; holding the file (96 MiB) or a whole tensor per part would be far over.
    assert extra < tensor_size + 3 * part_size + 16 * 2**20
    head = s3fs.S3FileSystem(
        endpoint_url=s3_endpoint, key="x", secret="x", skip_instance_cache=True
    ).info(url)
    assert head["size"] > count * tensor_size
