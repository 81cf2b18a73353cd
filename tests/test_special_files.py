"""Paths that name no regular file, met through every opener (`open_reader`, the stores, each
format's reader) and the command line: a FIFO (opening one waited for a writer forever), a
socket, a device, a symlink loop, and names no file can have (a lone surrogate, a NUL).

Each is refused before it is opened, with a typed error naming the path and what is there;
the command line prints one error line and exits 2. A regression that blocks again fails the
test after a few seconds (`_finishes`) instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli._support import ERROR_PREFIX
from weightstore import SafetensorsReader, SafetensorsStore, Store, errors, open_reader, safetensors
from weightstore.cli import main
from weightstore.entry import TensorEntry
from weightstore.formats import FORMATS
from weightstore.io import _source
from weightstore.io._local import REGULAR
from weightstore.locate import Kind, locate

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")

_PATIENCE_S = 10.0  # far longer than any of these calls takes; a blocked open never returns


def _finishes(call: Callable[[], Any], *fifos: Path) -> Any:
    """`call()`'s result (or its exception, raised here), failing the test if it blocks.

    A call still running after `_PATIENCE_S` is blocked in an open of a FIFO: a writer is
    opened on each of `fifos` so it ends, and the test fails."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as err:  # handed back to the test's thread
            outcome.append((False, err))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(_PATIENCE_S)
    if worker.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):  # a writer opened and closed: the reader ends
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(_PATIENCE_S)
        pytest.fail(f"blocked for {_PATIENCE_S:.0f} s: a FIFO was opened as a file")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """The command's single ``weightstore: error:`` line on stderr (and no traceback), and
    everything it printed (stdout, then stderr)."""
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0], out + err


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "model.safetensors"
    os.mkfifo(path)
    yield path


def _write_set(directory: Path) -> Path:
    """A two-shard SafeTensors set in `directory`; returns its index."""
    arrays = {"a": np.arange(6, dtype=np.float32), "b": np.ones(4, np.float32)}
    from weightstore import save_into

    save_into(arrays, SafetensorsStore.from_file(directory).with_max_shard_size(30))
    (index,) = directory.glob("*.index.json")
    return index


# -- a FIFO named directly -------------------------------------------------------------------


OPENERS: dict[str, Callable[[Path], Any]] = {
    "open_reader": lambda p: open_reader(p).close(),
    "Store.from_file": lambda p: Store.from_file(p).keys(),
    "SafetensorsStore.from_file": lambda p: SafetensorsStore.from_file(p).keys(),
    "locate": lambda p: locate(p),
    **{
        f"{fmt.name}.open_file": (lambda p, fmt=fmt: fmt.open_file(p).close())
        for fmt in FORMATS
        if fmt.open_file is not None
    },
}


@pytest.mark.parametrize("opener", list(OPENERS.values()), ids=list(OPENERS))
def test_every_opener_refuses_a_fifo_at_once(fifo: Path, opener: Callable[[Path], Any]) -> None:
    with pytest.raises(errors.NotAFileError) as caught:  # locate too: it probes what is there
        _finishes(lambda: opener(fifo), fifo)
    assert caught.value.path == str(fifo) and caught.value.kind == "a FIFO"
    assert str(caught.value) == f"{fifo}: is a FIFO, not a file"
    assert isinstance(caught.value, OSError) and caught.value.filename == str(fifo)


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--json"], ["verify"]], ids=" ".join)
@pytest.mark.parametrize("name", ["model.safetensors", "model.safetensors.index.json"])
def test_the_command_line_refuses_a_fifo_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], name: str
) -> None:
    path = tmp_path / name
    os.mkfifo(path)
    assert _finishes(lambda: main([*command, str(path)]), path) == 2
    line, printed = _one_error_line(capsys)
    assert str(path) in line and "is a FIFO, not a file" in printed


def test_a_fifo_swapped_in_after_the_look_is_refused_by_the_open(
    fifo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The look before the open says "a file"; the open must not block, and the descriptor's
    # own fstat refuses it.
    monkeypatch.setattr(_source, "kind_at", lambda path: REGULAR)
    with pytest.raises(errors.NotAFileError, match="is a FIFO, not a file"):
        _finishes(lambda: _source.open_readable(str(fifo)), fifo)


def test_a_socket_and_a_device_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.safetensors"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(errors.NotAFileError, match="is a socket, not a file"):
            open_reader(path)
    finally:
        server.close()
    with pytest.raises(errors.NotAFileError) as caught:
        open_reader(os.devnull)
    assert caught.value.kind == "a character device"


def test_a_symlink_loop_named_directly_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = tmp_path / "model.safetensors"
    os.symlink(loop.name, loop)
    for opener in (open_reader, lambda p: Store.from_file(p).keys(), SafetensorsReader.from_file):
        with pytest.raises(errors.NotAFileError, match="is a symlink loop") as caught:
            opener(loop)
        assert caught.value.errno == errno.ELOOP
    assert main(["inspect", str(loop)]) == 2
    assert _one_error_line(capsys)[0].endswith("is a symlink loop, not a file")


def test_a_directory_given_to_a_format_reader_stays_a_directory_error(tmp_path: Path) -> None:
    with pytest.raises(errors.PathIsDirectoryError):
        SafetensorsReader.from_file(tmp_path)


# -- special files a set or DCP checkpoint names ----------------------------------------------


def test_a_set_whose_index_names_a_fifo_refuses_it_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = _write_set(tmp_path)
    shard = sorted(tmp_path.glob("*-of-*.safetensors"))[-1]
    shard.unlink()
    os.mkfifo(shard)
    with pytest.raises(errors.SetError, match="is a FIFO, not a file") as caught:
        _finishes(lambda: open_reader(tmp_path), shard)
    assert caught.value.path == str(index) and caught.value.shard == shard.name
    for command in (["inspect"], ["inspect", "--json"], ["verify"]):
        argv = [*command, str(tmp_path)]
        assert _finishes(lambda argv=argv: main(argv), shard) == 2
        assert "is a FIFO, not a file" in _one_error_line(capsys)[1]


# -- names no file can have --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["\ud800.safetensors", "a\0b.safetensors"], ids=["surr", "nul"])
def test_a_user_path_no_file_can_have_is_missing_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = os.path.join(tmp_path, name)
    assert locate(path).kind is Kind.MISSING  # nothing can be there: a save target's answer
    openers: list[Callable[[str], Any]] = [
        open_reader,
        lambda p: Store.from_file(p).keys(),
        SafetensorsReader.from_file,
    ]
    for opener in openers:
        with pytest.raises(errors.FileMissingError, match="cannot exist: the name holds") as caught:
            opener(path)
        assert caught.value.path == path and caught.value.reason is not None
    for command in (["inspect"], ["inspect", "--json"], ["verify"]):
        assert main([*command, path]) == 2
        assert "cannot exist: the name holds" in _one_error_line(capsys)[1]


def test_a_shard_name_too_long_for_the_filesystem_is_a_missing_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by the set-index fuzzer: stat of a 300-character name raised ENAMETOOLONG, a bare
    # OSError out of every opener and exit 3 from the command line.
    index = _write_set(tmp_path)
    tree = json.loads(index.read_text())
    tensor = next(iter(tree["weight_map"]))
    tree["weight_map"][tensor] = "x" * 300 + ".safetensors"
    index.write_text(json.dumps(tree))
    with pytest.raises(errors.SetError, match=r"x{40}") as caught:
        open_reader(index)
    assert caught.value.path == str(index)
    for command in (["inspect"], ["inspect", "--json"], ["verify"]):
        assert main([*command, str(index)]) == 2
        _one_error_line(capsys)


def test_a_user_path_of_bytes_that_are_not_utf8_still_opens(tmp_path: Path) -> None:
    path = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"\xff.safetensors"))
    # "\udcff" is the byte 0xFF through surrogateescape, as sys.argv spells such a name
    safetensors.write_file(path, [TensorEntry.from_array("w", np.ones(2, np.float32))])
    assert os.path.exists(os.path.join(os.fsencode(tmp_path), b"\xff.safetensors"))
    with open_reader(path) as reader:
        assert reader.names() == ["w"]
    assert main(["verify", path]) == 0


# -- a DCP checkpoint ------------------------------------------------------------------------


def _hand_checkpoint(
    directory: Path, change: Callable[[dict[str, Any]], Any] | None = None
) -> Path:
    """The DCP index of tests/dcp/test_index.py (with `change` applied) and rank files that
    are large enough for it (not burnpack files: these tests fail before one is read)."""
    from tests.dcp.test_index import FILE0, FILE1, GOLDEN
    from weightstore.dcp._index import DCP_INDEX_NAME

    index = json.loads(GOLDEN)
    if change is not None:
        change(index)
    (directory / DCP_INDEX_NAME).write_text(json.dumps(index))
    for name in (FILE0, FILE1):
        (directory / name).write_bytes(bytes(16))
    return directory


def _refused_everywhere(
    directory: Path, capsys: pytest.CaptureFixture[str], expected: str, *fifos: Path
) -> None:
    with pytest.raises(errors.SetError, match=re.escape(expected)):
        _finishes(lambda: open_reader(directory), *fifos)
    for command in (["inspect"], ["inspect", "--json"], ["verify"]):
        argv = [*command, str(directory)]
        assert _finishes(lambda argv=argv: main(argv), *fifos) == 2, command
        assert expected in _one_error_line(capsys)[1]


def test_a_dcp_chunk_file_name_no_file_can_have_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def rename(index: dict[str, Any]) -> None:
        index["tensors"]["w"]["chunks"][0]["file"] = "rank-\ud800.bpk"

    _refused_everywhere(_hand_checkpoint(tmp_path, rename), capsys, "lone surrogate (U+D800)")


def test_a_dcp_rank_file_that_is_a_fifo_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.dcp.test_index import FILE1

    rank_file = _hand_checkpoint(tmp_path) / FILE1
    rank_file.unlink()
    os.mkfifo(rank_file)
    _refused_everywhere(tmp_path, capsys, "is a FIFO, not a file", rank_file)


def test_inspect_of_a_dcp_checkpoint_skips_a_loop_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from weightstore.dcp import BurnpackStorageWriter

    with warnings.catch_warnings():  # one process, no group: DCP says it assumes so
        warnings.simplefilter("ignore", UserWarning)
        state = {"w": torch.ones(2, 3)}
        dcp.save(state, storage_writer=BurnpackStorageWriter(tmp_path), no_dist=True)
    os.symlink("x", tmp_path / "x")
    (tmp_path / "notes.txt").write_text("not named by the index")
    assert main(["inspect", "--json", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)["set"]
    assert summary["skipped"] == [{"file": "x", "is": "a symlink loop"}]
    assert summary["ignored"] == [{"file": "notes.txt", "why": "not named by the index"}]
    assert main(["verify", str(tmp_path)]) == 0
