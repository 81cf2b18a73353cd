"""The I/O engine (`weightstore.io._engine`): which way a local file is read and why, the
``O_DIRECT`` source, reads split across threads, a store's ``with_io`` and its report; and, on
a real FUSE file system started here (a passthrough that delays every request, as a network
file system does), ``auto`` picks pread and keeps several requests in flight where a mapping
keeps one or two."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import SafetensorsStore, save_into
from weightstore.errors import InvalidOptionError, TruncatedError
from weightstore.io import _engine
from weightstore.io._engine import DirectSource, choose_io, direct_source, filesystem_of
from weightstore.io._source import PARALLEL_MIN, MmapSource, PreadSource


@pytest.fixture(autouse=True)
def _forget_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the mounts it sets up, not what an earlier lookup remembered."""
    monkeypatch.setattr(_engine, "_BY_DEVICE", {})


def _mountinfo(tmp_path: Path, *mounts: tuple[str, str]) -> str:
    lines = [f"{20 + n} 1 0:{n} / {point} rw - {fstype} src rw" for n, (point, fstype) in
             enumerate(mounts)]  # fmt: skip
    info = tmp_path / "mountinfo"
    info.write_text("\n".join(lines) + "\n")
    return str(info)


def test_the_file_system_is_the_deepest_mount_holding_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _mountinfo(tmp_path, ("/", "ext4"), ("/mnt", "nfs4"), ("/mnt/a\\040b", "fuse.sshfs"))
    monkeypatch.setattr(_engine, "_MOUNTINFO", info)
    assert filesystem_of("/etc/hosts") == "ext4"
    assert filesystem_of("/mnt/ckpt/model.safetensors") == "nfs4"
    assert filesystem_of("/mnt/a b/model.safetensors") == "fuse.sshfs"  # \040: a space
    assert filesystem_of("/mnt2/x") == "ext4"  # a sibling's prefix is no parent
    real = _mountinfo(tmp_path, ("/", "ext4"), ("/", "xfs"))  # by device: the last mount wins
    device = os.stat(tmp_path).st_dev
    Path(real).write_text(
        f"20 1 {os.major(device)}:{os.minor(device)} / /elsewhere rw - xfs x rw\n"
    )
    monkeypatch.setattr(_engine, "_MOUNTINFO", real)
    assert filesystem_of(str(tmp_path)) == "xfs"
    Path(real).write_text("")  # remembered by device: no second parse
    assert filesystem_of(str(tmp_path)) == "xfs"
    monkeypatch.setattr(_engine, "_MOUNTINFO", str(tmp_path / "none"))
    monkeypatch.setattr(_engine, "_BY_DEVICE", {})
    assert filesystem_of("/etc/hosts") is None


@pytest.mark.parametrize("fstype", ["nfs4", "cifs", "fuse.s3fs", "lustre", "9p"])
def test_auto_reads_a_network_or_fuse_file_by_pread(
    fstype: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_engine, "_MOUNTINFO", _mountinfo(tmp_path, ("/", fstype)))
    choice = choose_io(str(tmp_path))
    assert choice.mode == "pread"
    assert fstype in choice.reason and "round trip" in choice.reason


def test_auto_maps_a_local_file_unless_it_outgrows_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_engine, "_MOUNTINFO", _mountinfo(tmp_path, ("/", "ext4")))
    file = tmp_path / "m.safetensors"
    file.write_bytes(b"x" * 10_000)
    assert choose_io(str(file)).mode == "mmap"
    monkeypatch.setattr(_engine, "_memory_available", lambda: 4096)
    assert choose_io(str(file)).mode == "mmap"  # small files: free memory not even asked
    monkeypatch.setattr(_engine, "_SMALL_FILE", 0)
    choice = choose_io(str(file))
    assert choice.mode == "pread" and "10,000 bytes, more than the 4,096" in choice.reason
    (tmp_path / "set").mkdir()
    for n in range(3):
        (tmp_path / "set" / f"s{n}").write_bytes(b"y" * 2000)
    assert choose_io(str(tmp_path / "set")).mode == "pread"  # a set: its files together


def test_a_mode_asked_for_is_kept_and_a_bad_one_refused(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_bytes(b"z")
    assert choose_io(str(file), "pread").mode == "pread"
    assert choose_io(str(file), "mmap").reason == "asked for"
    with pytest.raises(InvalidOptionError, match="auto, mmap, pread, direct"):
        choose_io(str(file), "fast")  # type: ignore[arg-type]


def test_direct_where_the_file_system_refuses_it_reads_by_pread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    file = tmp_path / "f"
    file.write_bytes(b"abc")

    def refuse(path: str) -> DirectSource:
        raise OSError(errno.EINVAL, "Invalid argument", path)

    monkeypatch.setattr(_engine, "direct_supported", lambda path: False)
    monkeypatch.setattr(_engine, "DirectSource", refuse)
    choice = choose_io(str(file), "direct")
    assert choice.mode == "pread" and "refuses O_DIRECT" in choice.reason
    source = direct_source(str(file))
    assert type(source) is PreadSource and bytes(source.read(1, 2, "t")) == b"bc"
    source.close()


def _direct_file(tmp_path: Path, data: bytes) -> Path:
    file = tmp_path / "direct.bin"
    file.write_bytes(data)
    if choose_io(str(file), "direct").mode != "direct":
        pytest.skip("this file system refuses O_DIRECT")
    return file


def test_direct_reads_any_range_exactly(tmp_path: Path) -> None:
    data = np.random.default_rng(1).integers(0, 256, 3 * PARALLEL_MIN + 777, np.uint8).tobytes()
    file = _direct_file(tmp_path, data)
    source = DirectSource(str(file))
    try:
        for offset, size in ((0, 10), (4095, 2), (1, 8192), (5000, PARALLEL_MIN + 3),
                             (len(data) - 5, 5), (0, len(data)), (17, 0)):  # fmt: skip
            got = source.read(offset, size, "t")
            assert bytes(got) == data[offset : offset + size], (offset, size)
        with open(file, "r+b") as shrink:
            shrink.truncate(100)
        with pytest.raises(TruncatedError):
            source.read(0, 5000, "tensor data", "w")
    finally:
        source.close()


def test_a_large_pread_is_split_across_threads_and_checked(tmp_path: Path) -> None:
    data = np.random.default_rng(2).integers(0, 256, 2 * PARALLEL_MIN + 99, np.uint8).tobytes()
    file = tmp_path / "big.bin"
    file.write_bytes(data)
    source = PreadSource(str(file))
    try:
        assert bytes(source.read(3, len(data) - 3, "t")) == data[3:]
        with open(file, "r+b") as shrink:
            shrink.truncate(PARALLEL_MIN)
        with pytest.raises(TruncatedError) as caught:
            source.read(0, len(data), "tensor data", "w")
        assert caught.value.tensor == "w"
    finally:
        source.close()


def _read_in_child(path: str, queue: Any) -> None:
    source = PreadSource(path)
    queue.put(bytes(source.read(0, 2 * PARALLEL_MIN, "t"))[-4:])
    source.close()


def test_a_forked_child_reads_with_threads_of_its_own(tmp_path: Path) -> None:
    data = bytes(range(256)) * (2 * PARALLEL_MIN // 256)
    file = tmp_path / "fork.bin"
    file.write_bytes(data)
    PreadSource(str(file)).read(0, len(data), "t")  # the parent's read threads exist now
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(str(file), queue))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get(timeout=5) == data[-4:]


def _model_file(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    tensors = {f"t{i}": rng.standard_normal((512, 512)).astype(np.float32) for i in range(6)}
    save_into(dict(tensors), SafetensorsStore.from_file(path))
    return tensors


@pytest.mark.parametrize("mode", ["auto", "mmap", "pread", "direct"])
def test_a_store_reads_as_asked_and_reports_how(mode: str, tmp_path: Path) -> None:
    tensors = _model_file(tmp_path / "m.safetensors")
    store = SafetensorsStore.from_file(tmp_path / "m.safetensors").with_io(mode)
    model = {name: np.zeros_like(array) for name, array in tensors.items()}
    result = store.apply_to(model)
    assert all(np.array_equal(model[n], a) for n, a in tensors.items())
    choice = store.io_choice()
    assert choice is not None and result.io == str(choice)
    told = f"│ Read by: {choice}" in str(result)
    assert told == (choice.mode != "mmap")  # the summary tells a path other than a mapping
    source = store.reader()._source
    expected = {"mmap": MmapSource, "pread": PreadSource}.get(choice.mode, DirectSource)
    assert type(source) is expected
    if mode != "auto":
        assert choice.mode == mode or (mode == "direct" and choice.mode == "pread")


def test_a_copy_asking_another_mode_opens_a_reader_of_its_own(tmp_path: Path) -> None:
    _model_file(tmp_path / "m.safetensors")
    mapped = SafetensorsStore.from_file(tmp_path / "m.safetensors")
    assert type(mapped.reader()._source) is MmapSource  # opened before the copy is made
    copied = mapped.with_io("pread")
    assert type(copied.reader()._source) is PreadSource
    assert mapped.with_io("auto").reader() is mapped.reader()  # the same mode: shared


def test_a_bad_mode_is_refused_and_memory_and_urls_report_none(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="io must be one of"):
        SafetensorsStore.from_file(tmp_path / "m.safetensors").with_io("fast")
    store = SafetensorsStore.from_bytes()
    save_into({"w": np.zeros(2, np.float32)}, store)
    result = store.apply_to({"w": np.ones(2, np.float32)})
    assert result.is_success() and result.io is None and store.io_choice() is None


# -- on a real FUSE file system -------------------------------------------------------------

LATENCY_MS = 2


@contextlib.contextmanager
def _mounted(root: Path, mountpoint: Path) -> Iterator[Path]:
    """`root` served at `mountpoint` by the delaying passthrough, in a process of its own."""
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tests.io._fuse_passthrough", str(root), str(mountpoint),
         str(LATENCY_MS)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not (mountpoint / ".requests").exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.skip("the FUSE passthrough did not mount (no permission for /dev/fuse?)")
            time.sleep(0.05)
        yield mountpoint
    finally:
        unmounted = subprocess.run(["fusermount3", "-u", str(mountpoint)], check=False,
                                   capture_output=True)  # fmt: skip
        if unmounted.returncode != 0:  # still in use: detach it now, gone when let go
            subprocess.run(["fusermount3", "-uz", str(mountpoint)], check=False,
                           capture_output=True)  # fmt: skip
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(10)
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def _requests(mountpoint: Path) -> tuple[int, int, int]:
    requests, nbytes, most = (int(x) for x in (mountpoint / ".requests").read_text().split())
    return requests, nbytes, most


@pytest.fixture
def fuse_root(tmp_path: Path) -> Path:
    pytest.importorskip("mfusepy", reason="needs mfusepy (the dev extra) for the FUSE mount")
    if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
        pytest.skip("needs FUSE 3 (apt install fuse3) and /dev/fuse for the FUSE mount")
    try:
        import mfusepy  # noqa: F401  (loads libfuse: fails without it)
    except OSError as err:  # pragma: no cover - a system without libfuse
        pytest.skip(f"needs libfuse 3: {err}")
    root = tmp_path / "root"
    root.mkdir()
    return root


def test_on_fuse_auto_reads_by_pread_with_requests_in_flight(
    fuse_root: Path, tmp_path: Path
) -> None:
    tensors = _model_file(fuse_root / "m.safetensors")
    most: dict[str, int] = {}
    for mode in ("mmap", "auto"):
        mountpoint = tmp_path / f"mnt-{mode}"  # a fresh mount: nothing cached, counts from 0
        mountpoint.mkdir()
        with _mounted(fuse_root, mountpoint):
            assert (filesystem_of(str(mountpoint)) or "").startswith("fuse")
            model = {name: np.zeros_like(array) for name, array in tensors.items()}
            with SafetensorsStore.from_file(mountpoint / "m.safetensors").with_io(mode) as store:
                result = store.apply_to(model)
            assert all(np.array_equal(model[n], a) for n, a in tensors.items())
            requests, nbytes, most[mode] = _requests(mountpoint)
            assert nbytes >= sum(a.nbytes for a in tensors.values()) and requests > 0
            if mode == "auto":
                assert result.io is not None and result.io.startswith("pread (on a fuse")
    # Several parts of each tensor read at once: the round trips overlap.
    assert most["auto"] > most["mmap"], most


def test_the_commands_take_io(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from weightstore.cli import main

    tensors = _model_file(tmp_path / "m.safetensors")
    out = tmp_path / "out.safetensors"
    assert main(["convert", str(tmp_path / "m.safetensors"), str(out), "--io", "pread", "-q"]) == 0
    assert "by pread (asked for)" in capsys.readouterr().out
    model = {name: np.zeros_like(array) for name, array in tensors.items()}
    assert SafetensorsStore.from_file(out).apply_to(model).is_success()
    assert all(np.array_equal(model[n], a) for n, a in tensors.items())
    assert main(["verify", str(out), "--io", "direct", "-q"]) == 0
    assert main(["diff", str(out), str(tmp_path / "m.safetensors"), "--io", "pread"]) == 0
    assert main(["convert", str(out), str(tmp_path / "again.safetensors"), "-q"]) == 0
    assert "reading" not in capsys.readouterr().out  # a plain mapping is not told
    assert main(["verify", str(out), "--io", "fast"]) == 2  # a usage error
    assert "invalid choice: 'fast'" in capsys.readouterr().err
