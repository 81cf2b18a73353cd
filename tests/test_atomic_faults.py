"""Saves under faults (issue 11): a killed writer, a full disk, a file-size limit.

Whatever happens to a save, the destination holds its old bytes or the new ones, never a mix,
and no file but the destination is left in its directory. Kills run in child processes
(SIGKILL cannot be caught, so it is the honest test); every test runs on both ways of holding
the bytes: the anonymous ``O_TMPFILE`` file and the named ``<name>.<pid>-<n>.tmp`` fallback,
forced by making ``O_TMPFILE`` fail as a filesystem without it does.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from weightstore.errors import DestinationExistsError, SaveFailedError, WeightstoreError
from weightstore.io import _atomic
from weightstore.io._atomic import write_all, write_atomic

posix_only = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and rlimits are POSIX")

CHUNK_SIZE = 1 << 20  # bytes per write in the child; it reports after each
CHUNK_COUNT = 24  # a 24 MiB file: large enough that a kill lands mid-write
OLD = b"old contents, " * 1000

# Run by the child: make O_TMPFILE fail as on NFS (EOPNOTSUPP) when asked, pause just before
# the step that names the destination when asked (the kill point "publish"), and save
# CHUNK_COUNT chunks of `fill`, printing a line after each so the parent can kill it there.
CHILD = textwrap.dedent(
    """
    import errno, os, sys, time
    target, scratch, overwrite, fill = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
    chunk_size, chunk_count, pause = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7] == "1"
    durable = sys.argv[8] == "1"
    if scratch == "named":
        plain_open, tmpfile = os.open, getattr(os, "O_TMPFILE", -1)

        def no_tmpfile(path, flags, *args, **kwargs):
            if flags & tmpfile == tmpfile:
                raise OSError(errno.EOPNOTSUPP, "Operation not supported", path)
            return plain_open(path, flags, *args, **kwargs)

        os.open = no_tmpfile
    for step in ("link", "replace"):
        def paused(src, dst, *args, _plain=getattr(os, step), **kwargs):
            if pause and os.path.basename(os.fspath(dst)) == os.path.basename(target):
                print("publish", flush=True)
                time.sleep(60)
            return _plain(src, dst, *args, **kwargs)
        setattr(os, step, paused)
    from weightstore.io._atomic import write_all, write_atomic

    def write(file):
        piece = memoryview(fill.encode() * chunk_size)
        for index in range(chunk_count):
            write_all(file, piece)
            print(index, flush=True)
        print("written", flush=True)

    write_atomic(target, write, overwrite=overwrite, durable=durable)
    print("done", flush=True)
    """
)


def _new_contents(fill: str) -> bytes:
    return fill.encode() * CHUNK_SIZE * CHUNK_COUNT


def _run_child(
    target: Path,
    scratch: str,
    overwrite: bool,
    fill: str,
    kill_at: str | None,
    durable: bool = True,
) -> None:
    """Save in a child; SIGKILL it once it prints `kill_at` (or let it finish when None)."""
    pause = "1" if kill_at == "publish" else "0"
    sizes = [str(CHUNK_SIZE), str(CHUNK_COUNT)]
    flags = ["1" if overwrite else "0", fill, *sizes, pause, "1" if durable else "0"]
    args = [str(target), scratch, *flags]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip() == kill_at:
            child.send_signal(signal.SIGKILL)
            break
    stderr = child.communicate(timeout=60)[1]
    if kill_at is None:
        assert child.returncode == 0, stderr
    else:
        assert child.returncode == -signal.SIGKILL, f"{kill_at=}: {stderr}"


def _anonymous_files_work(directory: Path) -> bool:
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not os.path.isdir("/proc/self/fd"):
        return False
    try:
        os.close(os.open(directory, flag | os.O_WRONLY, 0o600))
    except OSError:
        return False
    return True


@pytest.fixture(params=["anonymous", "named"])
def scratch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Which way the save holds its bytes; "named" makes O_TMPFILE fail (EOPNOTSUPP)."""
    if request.param == "named":
        plain_open, tmpfile = os.open, getattr(os, "O_TMPFILE", -1)

        def no_tmpfile(path: str, flags: int, *args: object, **kwargs: object) -> int:
            if flags & tmpfile == tmpfile:
                raise OSError(errno.EOPNOTSUPP, "Operation not supported", path)
            return plain_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", no_tmpfile)
    yield str(request.param)


# -- killed saves ---------------------------------------------------------------------------------

KILL_POINTS = ["0", str(CHUNK_COUNT // 2), "written", "publish"]


@posix_only
@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "no-clobber"])
@pytest.mark.parametrize("scratch_kind", ["anonymous", "named"])
def test_killed_saves_leave_old_or_new_and_no_scratch(
    tmp_path: Path, scratch_kind: str, overwrite: bool
) -> None:
    target = tmp_path / "model.bpk"
    if overwrite:
        target.write_bytes(OLD)
    anonymous = scratch_kind == "anonymous" and _anonymous_files_work(tmp_path)
    for kill_at in KILL_POINTS:
        _run_child(target, scratch_kind, overwrite, "n", kill_at)
        if target.exists():  # the kill may land after the name was given ("written")
            assert target.read_bytes() in ((OLD,) if overwrite else ()) + (_new_contents("n"),)
            if not overwrite:
                target.unlink()  # the next no-clobber save needs the name free
        others = sorted(set(os.listdir(tmp_path)) - {"model.bpk"})
        # Each save starts by removing what the killed one before it left, so at most one
        # scratch file is there: none from an anonymous save (the bytes had no name), except
        # one killed between naming its scratch and the final rename.
        if kill_at == "written":  # the kill races with fsync and naming: either outcome
            assert len(others) <= 1, others
        elif anonymous:
            assert len(others) == (kill_at == "publish" and overwrite), (kill_at, others)
        else:
            assert len(others) == 1, (kill_at, others)
    _run_child(target, scratch_kind, overwrite, "f", None)
    assert os.listdir(tmp_path) == ["model.bpk"]  # the completed save removed the leftovers
    assert target.read_bytes() == _new_contents("f")


def test_an_anonymous_save_shows_no_scratch_file_while_writing(tmp_path: Path) -> None:
    if not _anonymous_files_work(tmp_path):
        pytest.skip("no O_TMPFILE here (not Linux, or the filesystem lacks it)")
    seen: list[list[str]] = []

    def write(file: BinaryIO) -> None:
        write_all(file, memoryview(b"x" * 1000))
        seen.append(os.listdir(tmp_path))

    write_atomic(tmp_path / "model.bpk", write)
    write_atomic(tmp_path / "model.bpk", write, overwrite=True)
    assert seen == [[], ["model.bpk"]]
    assert os.listdir(tmp_path) == ["model.bpk"]


@posix_only
def test_stale_scratch_is_removed_only_when_its_writer_is_gone(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid = int(dead.stdout)
    stale = tmp_path / f"model.bpk.{dead_pid}-0.tmp"
    live = tmp_path / f"model.bpk.{os.getppid()}-0.tmp"  # a process that exists
    other = tmp_path / f"other.bpk.{dead_pid}-0.tmp"  # another destination's: not ours to judge
    unrelated = tmp_path / "model.bpk.notes.tmp"
    locked = tmp_path / f"model.bpk.{dead_pid}-1.tmp"  # a writer this pid namespace cannot see
    for path in (stale, live, other, unrelated, locked):
        path.write_bytes(b"partial")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time; f = open(sys.argv[1], 'rb'); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
         str(locked)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        write_atomic(tmp_path / "model.bpk", lambda file: write_all(file, memoryview(b"new")))
    finally:
        holder.kill()
        holder.wait()
    if _atomic._pid_alive(dead_pid):
        pytest.skip(f"pid {dead_pid} was reused by a new process during the test")
    kept = {p.name for p in (live, other, unrelated, locked)}
    assert sorted(os.listdir(tmp_path)) == sorted(kept | {"model.bpk"})  # `stale` alone went


# -- disk full, size limits ---------------------------------------------------------------------

FSIZE_CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    import numpy as np
    from weightstore import burnpack
    from weightstore.entry import TensorEntry
    target, scratch, overwrite = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if scratch == "named":
        import errno
        plain_open, tmpfile = os.open, getattr(os, "O_TMPFILE", -1)

        def no_tmpfile(path, flags, *args, **kwargs):
            if flags & tmpfile == tmpfile:
                raise OSError(errno.EOPNOTSUPP, "Operation not supported", path)
            return plain_open(path, flags, *args, **kwargs)

        os.open = no_tmpfile
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so write(2) fails with EFBIG instead
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
    entries = [TensorEntry.from_array("w", np.ones(1 << 20, "<f4"))]  # 4 MiB
    try:
        burnpack.write_file(target, entries, overwrite=overwrite, auto_extension=False)
    except OSError as err:
        print(json.dumps({"type": type(err).__name__, "errno": err.errno,
                          "path": getattr(err, "path", None), "message": str(err)}))
    """
)


@posix_only
@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "new-file"])
@pytest.mark.parametrize("scratch_kind", ["anonymous", "named"])
def test_file_size_limit_is_a_save_error_naming_the_destination(
    tmp_path: Path, scratch_kind: str, overwrite: bool
) -> None:
    target = tmp_path / "model.bpk"
    if overwrite:
        target.write_bytes(OLD)
    args = [str(target), scratch_kind, "1" if overwrite else "0"]
    child = subprocess.run(
        [sys.executable, "-c", FSIZE_CHILD, *args], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    failure = json.loads(child.stdout)
    assert failure["type"] == "SaveFailedError", failure
    assert (failure["errno"], failure["path"]) == (errno.EFBIG, str(target))
    assert failure["message"].startswith(f"{target}: could not save")
    assert os.listdir(tmp_path) == (["model.bpk"] if overwrite else [])
    if overwrite:
        assert target.read_bytes() == OLD


def _fail_writes_after(monkeypatch: pytest.MonkeyPatch, allowed_size: int, code: int) -> None:
    """Make os.write fail with `code` once `allowed_size` bytes have been written."""
    plain_write, written = os.write, [0]

    def write(fd: int, data: bytes | memoryview) -> int:
        if written[0] + memoryview(data).nbytes > allowed_size:
            raise OSError(code, os.strerror(code))
        written[0] += memoryview(data).nbytes
        return plain_write(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "new-file"])
def test_disk_full_while_writing_keeps_the_old_file(
    tmp_path: Path, scratch: str, monkeypatch: pytest.MonkeyPatch, overwrite: bool
) -> None:
    target = tmp_path / "model.bpk"
    if overwrite:
        target.write_bytes(OLD)
    _fail_writes_after(monkeypatch, 3 * CHUNK_SIZE, errno.ENOSPC)

    def write(file: BinaryIO) -> None:
        for _ in range(8):
            write_all(file, memoryview(bytes(CHUNK_SIZE)))

    with pytest.raises(SaveFailedError) as caught:
        write_atomic(target, write, overwrite=overwrite)
    err = caught.value
    assert (err.path, err.errno, err.filename) == (str(target), errno.ENOSPC, str(target))
    assert isinstance(err, OSError) and isinstance(err, WeightstoreError)
    assert isinstance(err.__cause__, OSError) and err.__cause__.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == (["model.bpk"] if overwrite else [])
    if overwrite:
        assert target.read_bytes() == OLD


def test_disk_full_at_fsync_keeps_the_old_file(
    tmp_path: Path, scratch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ext4's delayed allocation and NFS report a full disk at fsync or close, not at write.
    target = tmp_path / "model.bpk"
    target.write_bytes(OLD)

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(SaveFailedError) as caught:
        write_atomic(target, lambda file: write_all(file, memoryview(b"new")), overwrite=True)
    assert (caught.value.path, caught.value.errno) == (str(target), errno.ENOSPC)
    assert os.listdir(tmp_path) == ["model.bpk"] and target.read_bytes() == OLD


def test_missing_directory_is_a_save_error(tmp_path: Path, scratch: str) -> None:
    target = tmp_path / "no-such-dir" / "model.bpk"
    with pytest.raises(SaveFailedError) as caught:
        write_atomic(target, lambda file: write_all(file, memoryview(b"new")))
    assert (caught.value.path, caught.value.errno) == (str(target), errno.ENOENT)
    assert "the directory does not exist" in str(caught.value)


def test_an_error_of_the_write_callback_passes_through(tmp_path: Path, scratch: str) -> None:
    # A source file that cannot be read is the source's fault, not the destination's: the
    # error keeps its type and names what it named.
    target = tmp_path / "model.bpk"
    target.write_bytes(OLD)

    def write(file: BinaryIO) -> None:
        write_all(file, memoryview(b"partial"))
        raise OSError(errno.EIO, "Input/output error", "source.safetensors")

    with pytest.raises(OSError) as caught:
        write_atomic(target, write, overwrite=True)
    assert type(caught.value) is OSError and caught.value.filename == "source.safetensors"
    assert os.listdir(tmp_path) == ["model.bpk"] and target.read_bytes() == OLD


def test_a_destination_that_appears_meanwhile_is_never_clobbered(
    tmp_path: Path, scratch: str
) -> None:
    target = tmp_path / "model.bpk"

    def write(file: BinaryIO) -> None:
        write_all(file, memoryview(b"ours"))
        target.write_bytes(b"theirs")  # a concurrent writer finishes first

    with pytest.raises(DestinationExistsError):
        write_atomic(target, write)
    assert os.listdir(tmp_path) == ["model.bpk"] and target.read_bytes() == b"theirs"


def test_a_filesystem_that_cannot_link_anonymous_files_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some sandboxes give O_TMPFILE but refuse linkat through /proc: found out before a byte
    # of the model is written, so the save takes the named way instead of failing at the end.
    monkeypatch.setattr(_atomic, "_linkable_devices", {})
    plain_link = os.link

    def link(src: str, dst: str, *args: object, **kwargs: object) -> None:
        if str(src).startswith("/proc/"):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), src)
        plain_link(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", link)
    target = tmp_path / "model.bpk"
    write_atomic(target, lambda file: write_all(file, memoryview(b"one")))
    write_atomic(target, lambda file: write_all(file, memoryview(b"two")), overwrite=True)
    assert os.listdir(tmp_path) == ["model.bpk"] and target.read_bytes() == b"two"


def test_save_failed_error_fields_and_message() -> None:
    err = SaveFailedError("out/model.bpk", errno.ENOSPC)
    assert isinstance(err, OSError) and isinstance(err, WeightstoreError)
    assert (err.path, err.errno, err.filename) == ("out/model.bpk", errno.ENOSPC, "out/model.bpk")
    assert err.strerror == os.strerror(errno.ENOSPC)
    assert str(err) == (
        "out/model.bpk: could not save, no space left on device (ENOSPC); an existing file "
        "keeps its old bytes and no partial copy is left; free some space and save again"
    )
    assert SaveFailedError("m.bpk", None, "disk went away").detail.startswith(
        "could not save, disk went away;"
    )
