"""Old set or new set, never a mix, on an object store: saves into ``s3://bucket/ckpt`` killed
with SIGKILL at random instants.

A child process saves into the folder when told to; the parent kills it at a random instant of
the save, then reads the folder as a set reader must (the index, else the single file; every
shard's set id against the index's; every tensor against the models). It must hold the last
save that finished or the one that was killed, whole. Saves alternate two models whose every
tensor differs, through shard counts that change (3, 2, 1, 1, 4, 4), so a kill meets plain and
tagged names, sharded and unsharded sets. The next child saves over whatever the kill left
(uncommitted shards, an incomplete upload), and a last, unkilled save must leave exactly its
own files and no upload behind.

Children are separate interpreters (an event loop's threads do not survive a fork); each is
started while the previous one is being checked, so a kill costs little more than a save.
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fsspec")
s3fs = pytest.importorskip("s3fs")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX"),
]

KILLS = 20
INDEX, SINGLE = "model.safetensors.index.json", "model.safetensors"
SET_ID_KEY = "weightstore.set_id"

_SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from weightstore import SafetensorsStore

    endpoint, folder = sys.argv[1:3]
    options = {"endpoint_url": endpoint, "key": "x", "secret": "x"}
    ROWS, COLUMNS, TENSORS = 16, 1024, 12  # 12 tensors of 64 KiB
    TENSOR_SIZE = ROWS * COLUMNS * 4
    SHARD_SIZE = {1: 10**9, 2: 6 * TENSOR_SIZE, 3: 4 * TENSOR_SIZE, 4: 3 * TENSOR_SIZE}
    CYCLE = [("A", 3), ("B", 2), ("A", 1), ("B", 1), ("A", 4), ("B", 4)]
    MODELS = {
        name: {f"layers.{i}.weight": np.full((ROWS, COLUMNS), seed * 1000 + i, np.float32)
               for i in range(TENSORS)}
        for name, seed in (("A", 1), ("B", 2))
    }
    store = SafetensorsStore.from_file(folder, storage_options=options).overwrite()
    import weightstore.safetensors, weightstore.sets._writer, weightstore.io._remote_write
    from weightstore.io._fs import filesystem_for
    filesystem_for(folder, options)[0].ls(folder.split("/")[2])  # connected, caches warm
    print("ready", flush=True)
    for line in sys.stdin:
        number = int(line)
        model, count = CYCLE[number % len(CYCLE)]
        sized = store.with_max_shard_size(SHARD_SIZE[count]).with_metadata("save", str(number))
        sized.with_metadata("format", "pt").collect_from(MODELS[model])
        print(f"saved {number}", flush=True)
    """
)
CYCLE = [("A", 3), ("B", 2), ("A", 1), ("B", 1), ("A", 4), ("B", 4)]
SEEDS = {"A": 1, "B": 2}


class MixedError(AssertionError):
    """The folder loads as neither whole save: what the commit protocol must prevent."""


class Saver:
    """A child interpreter that saves into the folder when told a save number."""

    def __init__(self, endpoint: str, folder: str) -> None:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SAVER, endpoint, folder],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line == "ready\n", f"the saver did not start: {line!r}"

    def save(self, number: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{number}\n")
        self.process.stdin.flush()

    def finish(self) -> str:
        """Wait for the save to end; what it printed."""
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        assert self.process.returncode == -signal.SIGKILL, "the saver ended on its own"


def _metadata(data: bytes) -> dict[str, str]:
    (size,) = struct.unpack("<Q", data[:8])
    header: dict[str, Any] = json.loads(data[8 : 8 + size])
    metadata: dict[str, str] = header.get("__metadata__", {})
    return metadata


def loaded_save(options: dict[str, Any], folder: str) -> int:
    """The number of the save the folder holds, read as a set reader must. Raises
    `MixedError` when it holds no whole save."""
    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    if fs.exists(f"{folder}/{INDEX}"):
        index = json.loads(fs.cat_file(f"{folder}/{INDEX}"))
        weight_map, metadata = index["weight_map"], index["metadata"]
        tensors: dict[str, np.ndarray[Any, Any]] = {}
        for shard in sorted(set(weight_map.values())):
            data = fs.cat_file(f"{folder}/{shard}")
            if _metadata(data)[SET_ID_KEY] != metadata[SET_ID_KEY]:
                raise MixedError(f"{shard} belongs to another save than the index")
            loaded = safetensors_numpy.load(data)
            tensors.update({k: v for k, v in loaded.items() if weight_map[k] == shard})
        count = len(set(weight_map.values()))
    else:
        data = fs.cat_file(f"{folder}/{SINGLE}")
        tensors, metadata, count = safetensors_numpy.load(data), _metadata(data), 1
    number = int(metadata["save"])
    model, expected_count = CYCLE[number % len(CYCLE)]
    expected = {
        f"layers.{i}.weight": np.full((16, 1024), SEEDS[model] * 1000 + i, np.float32)
        for i in range(12)
    }
    if tensors.keys() != expected.keys() or not all(
        np.array_equal(tensors[k], v) for k, v in expected.items()
    ):
        raise MixedError(f"save {number}: the tensors are not model {model}'s, whole")
    assert count == expected_count, f"save {number}: {count} shards, not {expected_count}"
    return number


def _names(options: dict[str, Any], folder: str) -> set[str]:
    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    return {path.rsplit("/", 1)[1] for path in fs.ls(folder, detail=False)}


def test_a_save_killed_at_any_instant_leaves_the_old_set_or_the_new(
    s3_bucket: str, s3_endpoint: str, storage_options: dict[str, Any]
) -> None:
    folder = f"{s3_bucket}/ckpt"
    savers: list[Saver] = []
    try:
        _kill_savers(s3_endpoint, storage_options, folder, savers)
    finally:
        for saver in savers:
            if saver.process.poll() is None:
                saver.process.kill()
                saver.process.wait()


def _kill_savers(
    s3_endpoint: str, storage_options: dict[str, Any], folder: str, savers: list[Saver]
) -> None:
    def start() -> Saver:
        savers.append(Saver(s3_endpoint, folder))
        return savers[-1]

    saver = start()
    saver.wait_ready()
    started = time.monotonic()
    saver.save(0)
    assert saver.finish() == "saved 0\n"
    duration = time.monotonic() - started  # of one whole save: the span kills are spread over
    saver.kill()
    assert loaded_save(storage_options, folder) == 0

    rng = random.Random(14)
    finished, outcomes = 0, {"old": 0, "new": 0}
    upcoming = start()
    for number in range(1, KILLS + 1):
        saver, upcoming = upcoming, start()
        saver.wait_ready()
        saver.save(number)
        time.sleep(rng.uniform(0, 1.2 * duration))
        saver.kill()
        found = loaded_save(storage_options, folder)
        assert found in (finished, number), f"kill {number}: the folder holds save {found}"
        outcomes["new" if found == number else "old"] += 1
        finished = found
    print(f"{KILLS} kills over a {duration * 1000:.0f} ms save: {outcomes}")
    assert outcomes["old"] > 0, "no kill landed before a commit"

    # An unkilled save over whatever the last kill left: its own files and nothing else.
    final = next(n for n in range(KILLS + 1, KILLS + 7) if CYCLE[n % len(CYCLE)][1] > 1)
    upcoming.wait_ready()
    upcoming.save(final)
    assert upcoming.finish() == f"saved {final}\n"
    upcoming.kill()
    assert loaded_save(storage_options, folder) == final
    fs = s3fs.S3FileSystem(**storage_options, skip_instance_cache=True)
    index = json.loads(fs.cat_file(f"{folder}/{INDEX}"))
    assert _names(storage_options, folder) == {*index["weight_map"].values(), INDEX}
    bucket = folder.removeprefix("s3://").split("/")[0]
    assert fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", []) == []
