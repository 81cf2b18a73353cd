"""`weightstore.locate`: one answer to "what is at this path", and the openers built on it.

`open_reader`, `Store.from_file` and the command line's opener accept the same inputs (a file
of any format, a set's directory or index, a DCP directory) and refuse the same ones with the
same error; a store opens its source once, shares the reader with its copies, and closes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._opens import counting_opens
from weightstore import (
    BurnpackStore,
    SafetensorsStore,
    Store,
    burnpack,
    open_reader,
    safetensors,
    save_into,
)
from weightstore.cli import main as cli
from weightstore.cli._open import open_file
from weightstore.errors import FileMissingError, UnsupportedFormatError
from weightstore.locate import Kind, Location, locate

WEIGHTS: dict[str, np.ndarray[Any, Any]] = {
    "a": np.arange(6, dtype=np.float32).reshape(2, 3),
    "b": np.ones(4, dtype=np.float32),
}


def _set(directory: Path) -> Path:
    save_into(WEIGHTS, SafetensorsStore.from_file(directory).with_max_shard_size(20))
    return directory


def test_a_file_is_located_with_its_format_and_head(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_into(WEIGHTS, SafetensorsStore.from_file(path))
    found = locate(path)
    assert (found.kind, found.format, found.is_url, found.index) == (
        Kind.FILE, safetensors.FORMAT, False, None,
    )  # fmt: skip
    assert found.size == path.stat().st_size and path.read_bytes().startswith(found.head)
    assert found == locate(str(path)) and isinstance(found, Location)


def test_burn_s_extension_rule_resolves_the_path(tmp_path: Path) -> None:
    save_into(WEIGHTS, BurnpackStore.from_file(tmp_path / "m"))  # writes m.bpk
    found = locate(tmp_path / "m")
    assert found.kind is Kind.FILE and found.path == str(tmp_path / "m.bpk")
    assert found.format is burnpack.FORMAT


def test_a_set_is_located_by_directory_and_by_index(tmp_path: Path) -> None:
    directory = _set(tmp_path / "ckpt")
    by_directory = locate(directory)
    assert by_directory.kind is Kind.SET and by_directory.format is safetensors.FORMAT
    assert by_directory.index is not None and by_directory.index.endswith(".index.json")
    by_index = locate(by_directory.index)
    assert (by_index.kind, by_index.format, by_index.index) == (
        Kind.SET, safetensors.FORMAT, by_directory.index,
    )  # fmt: skip
    assert by_directory.head == b"" and by_directory.size == 0  # no file was probed


def test_a_dcp_directory_is_located(tmp_path: Path) -> None:
    from tests.dcp.test_reader import write_checkpoint

    found = locate(write_checkpoint(tmp_path / "ckpt"))
    assert found.kind is Kind.DCP and found.format is burnpack.FORMAT
    assert found.index == str(tmp_path / "ckpt" / "dcp.index.json")


def test_nothing_there_is_missing_with_the_format_its_name_names(tmp_path: Path) -> None:
    assert locate(tmp_path / "new.safetensors") == Location(
        str(tmp_path / "new.safetensors"), Kind.MISSING, safetensors.FORMAT, False
    )
    assert locate(tmp_path / "new.txt").format is None
    empty = locate(tmp_path)  # a directory holding no set: a target for a set save
    assert empty.kind is Kind.MISSING and empty.format is None and not empty.exists


def test_a_file_of_no_format_is_located_without_one(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not weights")
    found = locate(path)
    assert found.kind is Kind.FILE and found.format is None and found.head == b"not weights"


def test_open_reader_opens_a_set_by_directory_and_by_index(tmp_path: Path) -> None:
    from weightstore.sets import SetReader

    directory = _set(tmp_path / "ckpt")
    index = locate(directory).index
    assert index is not None
    for path in (directory, index):
        with open_reader(path) as reader:
            assert isinstance(reader, SetReader)
            assert reader.names() == ["a", "b"]
            np.testing.assert_array_equal(reader.get("a"), WEIGHTS["a"])


def test_open_reader_opens_a_dcp_directory(tmp_path: Path) -> None:
    from tests.dcp.test_reader import tensors, write_checkpoint

    with open_reader(write_checkpoint(tmp_path / "ckpt")) as reader:
        assert reader.names() == sorted(tensors())
        np.testing.assert_array_equal(reader.get("enc.w"), tensors()["enc.w"][0])


def test_every_opener_refuses_a_non_weight_file_with_one_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"plain text, no tensors here")
    messages = []
    for opener in (open_reader, Store.from_file, open_file):
        with pytest.raises(UnsupportedFormatError) as caught:
            opener(str(path))
        messages.append(str(caught.value))
    assert len(set(messages)) == 1 and str(path) in messages[0]
    assert 'is a text file ("plain text, no tensors here"), not weights' in messages[0]


def test_every_opener_raises_file_missing_for_nothing_there(tmp_path: Path) -> None:
    with pytest.raises(FileMissingError):
        open_reader(tmp_path / "absent.safetensors")
    with pytest.raises(FileMissingError):
        open_file(str(tmp_path / "absent.safetensors"))
    with pytest.raises(FileMissingError):
        Store.from_file(tmp_path / "absent.safetensors").keys()


# -- one open reader per store ------------------------------------------------------------------


def test_a_store_shares_its_reader_with_its_copies_and_closes_it(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_into(WEIGHTS, SafetensorsStore.from_file(path))
    with counting_opens(path) as opens:
        with Store.from_file(path) as store:
            copy = store.with_regex("^a").allow_partial()
            opened = store.reader()
            assert opened is copy.reader()
            store.keys(), copy.keys(), store.read_metadata(), copy.read_metadata()
        assert len(opens) == 1
    assert copy.reader() is not opened  # closed with the store: a later read opens anew
    copy.close()


def test_a_copy_reading_the_source_another_way_gets_its_own_reader(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_into(WEIGHTS, SafetensorsStore.from_file(path))
    store = SafetensorsStore.from_file(path)
    assert store.with_variant("fp16").reader() is not store.reader()
    assert store.with_variant(None).reader() is store.reader()  # no change, the same one
    store.close()


def test_a_save_into_the_store_makes_later_reads_see_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    store = SafetensorsStore.from_file(path).overwrite()
    save_into(WEIGHTS, store)
    assert store.keys() == ["a", "b"]
    save_into({"c": np.zeros(2, np.float32)}, store)
    assert store.keys() == ["c"] and store.with_regex("c").keys() == ["c"]
    store.close()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
@pytest.mark.parametrize("name", ["m.safetensors", "m.bpk"])
def test_a_thousand_read_metadata_calls_leak_no_descriptor(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    save_into(WEIGHTS, Store.from_file(path))
    store = Store.from_file(path)
    before = _fds()
    for _ in range(1000):
        store.read_metadata()
    assert _fds() - before <= 1  # the one open reader, at most
    store.close()
    assert _fds() <= before


# -- convert opens its source once ---------------------------------------------------------------

_COUNT_CONVERT = """
import contextlib, io, sys
from tests._opens import counting_opens
from weightstore.cli import main
src, dst = sys.argv[1], sys.argv[2]
with counting_opens(src) as opens, contextlib.redirect_stdout(io.StringIO()):
    assert main(["convert", "-q", src, dst]) == 0
print(len(opens))
"""


def _opens_per_convert(src: Path, dst: Path) -> int:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_CONVERT, str(src), str(dst)],
        capture_output=True, text=True, check=True, env=env, cwd=root,
    )  # fmt: skip
    return int(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("name", "dst"), [("a.safetensors", "b.bpk"), ("a.bpk", "b.safetensors")])
def test_convert_opens_its_source_once(tmp_path: Path, name: str, dst: str) -> None:
    src = tmp_path / name
    save_into(WEIGHTS, Store.from_file(src))
    assert _opens_per_convert(src, tmp_path / dst) == 1
    assert cli(["verify", "-q", str(tmp_path / dst)]) == 0


def test_convert_of_a_pytorch_checkpoint_opens_it_at_most_twice(tmp_path: Path) -> None:
    from tests.test_import_cost import _torch_save_style_zip

    src = _torch_save_style_zip(tmp_path / "a.pt")
    assert _opens_per_convert(src, tmp_path / "b.safetensors") <= 2
    with open_reader(tmp_path / "b.safetensors") as reader:
        assert reader.get("layer.weight").tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
