"""Byte sources under faults (issue 11): a file that shrinks, descriptors that run out.

A mapped file that shrinks would kill the process with SIGBUS on the next touch of a page past
its new end, so those tests run in a child process (a SIGBUS would take pytest with it) and
check that it exits normally. Descriptor limits are set in children too (``RLIMIT_NOFILE``).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from weightstore import safetensors
from weightstore.entry import TensorEntry
from weightstore.io._source import MmapSource, PreadSource

posix_only = pytest.mark.skipif(os.name != "posix", reason="SIGBUS and rlimits are POSIX")

TENSOR_COUNT = 4
TENSOR_NUMEL = 1 << 16  # 256 KiB of f32 per tensor: each spans whole pages


def _model(path: Path) -> str:
    entries = [
        TensorEntry.from_array(f"t{i}", np.full(TENSOR_NUMEL, i, "<f4"))
        for i in range(TENSOR_COUNT)
    ]
    return safetensors.write_file(path, entries)


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- a mapped file that shrinks ------------------------------------------------------------------

SHRINK_CHILD = """
    import os, sys
    from weightstore.io._source import MmapSource
    from weightstore.errors import TruncatedError
    from weightstore.safetensors import SafetensorsReader
    path, new_size = sys.argv[1], int(sys.argv[2])
    reader = SafetensorsReader.from_file(path)          # mapped, header parsed
    source = MmapSource(path)
    first = reader.get("t0").copy()                     # read before the file shrinks
    os.truncate(path, new_size)
    for what, read in [
        ("reader", lambda: reader.get("t3").sum()),    # .sum() touches every page
        ("source", lambda: bytes(source.read(source.size - 4096, 4096, "the last page", "t3"))),
        ("mapping", lambda: source.mapping[-1]),
    ]:
        try:
            read()
        except TruncatedError as err:
            print(what, err.path == path, err.expected, err.found, err.tensor, flush=True)
        else:
            print(what, "no error", flush=True)
    reader.close(); source.close()
    """


@posix_only
@pytest.mark.parametrize("new_size", [0, 4096], ids=["emptied", "cut-after-header"])
def test_reading_a_mapped_file_that_shrank_raises_instead_of_sigbus(
    tmp_path: Path, new_size: int
) -> None:
    path = _model(tmp_path / "m.safetensors")
    child = _run(SHRINK_CHILD, path, str(new_size))
    assert child.returncode == 0, f"exit {child.returncode} (-7 is SIGBUS): {child.stderr}"
    lines = child.stdout.splitlines()
    assert lines[0] == f"reader True {TENSOR_NUMEL * 4} 0 t3"
    assert lines[1] == "source True 4096 0 t3"
    assert lines[2].startswith("mapping True ")


def test_a_read_within_what_is_left_still_works(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.safetensors")
    source = MmapSource(path)
    try:
        os.truncate(path, source.size - 100)
        assert bytes(source.read(0, 8, "the header length")) == bytes(source.read(0, 8, "again"))
    finally:
        source.close()


# -- descriptors ----------------------------------------------------------------------------------

UNCLOSED_PREAD_CHILD = """
    import resource, sys
    from weightstore.safetensors import SafetensorsReader
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    total = 0.0
    for index in range(2000):
        reader = SafetensorsReader.from_file(sys.argv[1], mode="pread")   # never closed
        total += float(reader.get("t1")[0])
    print(index + 1, total)
    """


@posix_only
def test_unclosed_pread_readers_do_not_leak_descriptors(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.safetensors")
    child = _run(UNCLOSED_PREAD_CHILD, path)
    assert child.returncode == 0, child.stderr  # EMFILE near reader 1,020 before issue 11
    assert child.stdout.split() == ["2000", "2000.0"]


def test_a_collected_pread_source_closes_its_descriptor(tmp_path: Path) -> None:
    # Count only descriptors open on this file: collecting garbage may also close descriptors
    # that earlier tests left to the collector, so a process-wide count is not stable.
    path = _model(tmp_path / "m.safetensors")
    assert _descriptors_on(path) == 0
    source = PreadSource(path)
    assert _descriptors_on(path) == 1
    del source
    gc.collect()
    assert _descriptors_on(path) == 0


def test_pread_close_is_idempotent_and_reads_after_it_fail(tmp_path: Path) -> None:
    source = PreadSource(_model(tmp_path / "m.safetensors"))
    source.close()
    source.close()
    with pytest.raises(ValueError, match="closed"):
        source.read(0, 8, "the header length")


# How many files can stay mapped (an array of each alive, its reader closed) under a limit of
# 1,024 descriptors. Before Python 3.13 the mmap module keeps a duplicate descriptor for every
# mapping, so the limit is reached near 1,020 (1,024 less stdin, stdout, stderr and the one a
# reader opens); from 3.13 the source maps with trackfd=False and a closed reader keeps none.
MAPPED_CHILD = """
    import errno, resource, sys
    from weightstore.safetensors import SafetensorsReader
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    arrays = []
    try:
        for _ in range(3000):
            with SafetensorsReader.from_file(sys.argv[1]) as reader:
                arrays.append(reader.get("t1"))
    except OSError as err:
        assert err.errno == errno.EMFILE, err
    print(len(arrays))
    """


@posix_only
def test_live_mapped_files_hold_at_most_one_descriptor_each(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.safetensors")
    child = _run(MAPPED_CHILD, path)
    assert child.returncode == 0, child.stderr
    mapped = int(child.stdout)
    if sys.version_info >= (3, 13):
        assert mapped == 3000  # trackfd=False: a closed reader's mapping holds no descriptor
    else:
        assert 1000 <= mapped <= 1021, mapped  # one descriptor per live mapping


def test_an_open_mapped_source_holds_one_descriptor(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.safetensors")
    before = _open_descriptors()
    sources = [MmapSource(path) for _ in range(5)]
    assert _open_descriptors() == before + 5
    for source in sources:
        source.close()
    assert _open_descriptors() == before


def _descriptors_on(path: str | Path) -> int:
    """Descriptors of this process open on `path`."""
    folder = Path("/proc/self/fd")
    if not folder.is_dir():
        pytest.skip("no /proc/self/fd to see where descriptors point")
    target = os.path.realpath(path)
    count = 0
    for entry in folder.iterdir():
        try:
            count += os.readlink(entry) == target
        except OSError:  # closed between listing and reading, or the listing's own descriptor
            continue
    return count


def _open_descriptors() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(folder):
            return len(os.listdir(folder)) - 1  # less the one listdir opened
    pytest.skip("no /proc/self/fd or /dev/fd to count descriptors with")
