"""Zip members read whole or as text (`_inflate`, `_ZipRecords`, TorchScript's code/ files):
each is held to its limit by its declared size before a byte is inflated, and inflated in
bounded chunks, so that a member whose header lies is refused after one byte too many.

A fuzzer found the first: a 1 MB TorchScript archive whose ``code/__torch__.py`` inflated to
1 GB of newlines, which the class-header parser decoded and split into a list of 10**9 lines
(10 GB of memory). Peak memory is measured with `tracemalloc` (the Python heap, where zlib,
bz2 and lzma put what they inflate) around one open.
"""

from __future__ import annotations

import struct
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.pytorch_reader._support import op_global, op_storage, op_str, op_tensor, pickle_of
from weightstore import cli
from weightstore.errors import ArchiveError, LimitExceeded
from weightstore.pytorch_reader import MAX_CODE_SIZE, PytorchReader
from weightstore.pytorch_reader._layout import MAX_RECORD_SIZE
from weightstore.pytorch_reader._torchscript import ClassHeader, parse_class_headers

MIB = 2**20
PEAK_BOUND = 4 * MIB  # the most one open may add to the heap here: a few 64 KiB chunks
LZMA_DICTIONARY = 8 * MIB  # what zipfile's LZMA writer asks for, allocated by the decompressor
CODE = "archive/code/__torch__.py"
HEADER = b'class Net(Module):\n  __parameters__ = ["w", ]\n  w : Tensor\n'
COMPRESSIONS = [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]

# data.pkl of a TorchScript module ``Net`` with one parameter ``w`` (two floats in data/0).
ROOT = pickle_of(
    op_global("__torch__", "Net")
    + b")\x81}"  # EMPTY_TUPLE NEWOBJ EMPTY_DICT
    + op_str("w")
    + op_tensor(op_storage("0", 2), 0, (2,), (1,))
    + b"sb"  # SETITEM BUILD
)
TWO_FLOATS = struct.pack("<2f", 1.0, 2.0)


def write_member(archive: zipfile.ZipFile, name: str, pieces: Any, compression: int) -> None:
    """Entry `name` written from `pieces` (an iterable of bytes), never all in memory."""
    info = zipfile.ZipInfo(name)
    info.compress_type = compression
    with archive.open(info, "w") as out:
        for piece in pieces:
            out.write(piece)


def script_zip(
    path: Path,
    code: Any,
    *,
    compression: int = zipfile.ZIP_DEFLATED,
    records: dict[str, tuple[Any, int]] | None = None,
) -> Path:
    """A TorchScript-shaped archive whose ``code/__torch__.py`` is the bytes `code` yields."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", ROOT)
        archive.writestr("archive/data/0", TWO_FLOATS)
        archive.writestr("archive/constants.pkl", pickle_of(b")"))
        for name, (pieces, method) in (records or {}).items():
            write_member(archive, f"archive/{name}", pieces, method)
        write_member(archive, CODE, code, compression)
    return path


def padded(size: int) -> Any:
    """`HEADER`, then newlines up to `size` bytes, a MiB at a time."""
    yield HEADER
    left = size - len(HEADER)
    while left > 0:
        yield b"\n" * min(left, MIB)
        left -= MIB


def zeros(size: int) -> Any:
    left = size
    while left > 0:
        yield b"\0" * min(left, MIB)
        left -= MIB


def patch_directory(path: Path, member: str, offset: int, value: int) -> None:
    """Set the u32 at `offset` of `member`'s central directory entry (16: its CRC-32, 24: the
    size it declares it inflates to) to `value`: a lying header."""
    data = bytearray(path.read_bytes())
    entry = data.index(b"PK\x01\x02")
    while True:
        name_size = struct.unpack_from("<H", data, entry + 28)[0]
        if data[entry + 46 : entry + 46 + name_size] == member.encode():
            break
        entry = data.index(b"PK\x01\x02", entry + 4)
    struct.pack_into("<I", data, entry + offset, value)
    path.write_bytes(bytes(data))


def declare_size(path: Path, member: str, size: int) -> None:
    patch_directory(path, member, 24, size)


def bound(compression: int) -> int:
    return PEAK_BOUND + (LZMA_DICTIONARY if compression == zipfile.ZIP_LZMA else 0)


def peak_of(action: Callable[[], object]) -> int:
    """Bytes the heap grew by at most while `action` ran."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        action()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def names_of(path: Path, **limits: int) -> list[str]:
    with PytorchReader(path, **limits) as reader:
        return reader.names()


# -- TorchScript code ---------------------------------------------------------------------------


def test_a_code_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    path = script_zip(tmp_path / "bomb.pt", padded(64 * MIB))  # 64 MiB of newlines in 64 KB
    assert path.stat().st_size < MIB

    def open_it() -> None:
        with pytest.raises(LimitExceeded) as caught:
            PytorchReader(path)
        error = caught.value
        assert (error.found, error.limit, error.path) == (64 * MIB, MAX_CODE_SIZE, str(path))
        assert CODE in error.what and "TorchScript code" in error.what

    assert peak_of(open_it) < PEAK_BOUND


def test_code_at_the_limit_is_parsed_as_a_stream(tmp_path: Path) -> None:
    path = script_zip(tmp_path / "at.pt", padded(MAX_CODE_SIZE))
    names: list[str] = []
    assert peak_of(lambda: names.extend(names_of(path))) < PEAK_BOUND
    assert names == ["w"]
    over = script_zip(tmp_path / "over.pt", padded(MAX_CODE_SIZE + 1))
    with pytest.raises(LimitExceeded) as caught:
        PytorchReader(over)
    assert (caught.value.found, caught.value.limit) == (MAX_CODE_SIZE + 1, MAX_CODE_SIZE)


def test_the_code_limit_is_an_option_and_counts_every_file_read(tmp_path: Path) -> None:
    root = pickle_of(
        op_global("__torch__", "Net")
        + b")\x81}"
        + op_str("child")
        + op_global("__torch__.sub", "Child")
        + b")\x81}"
        + op_str("v")
        + op_tensor(op_storage("0", 2), 0, (2,), (1,))
        + b"sbsb"
    )
    net, child = b"class Net(Module):\n", b'class Child(Module):\n  __parameters__ = ["v", ]\n'
    path = tmp_path / "two.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", root)
        archive.writestr("archive/data/0", TWO_FLOATS)
        archive.writestr("archive/code/__torch__.py", net)
        archive.writestr("archive/code/__torch__/sub.py", child + b"  v : Tensor\n")
    total = len(net) + len(child) + len(b"  v : Tensor\n")
    assert names_of(path, max_code_size=total) == ["child.v"]
    with pytest.raises(LimitExceeded) as caught:
        PytorchReader(path, max_code_size=total - 1)  # each file alone is under it
    assert caught.value.found == total
    assert "archive/code/__torch__/sub.py" in caught.value.what


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_code_that_inflates_past_its_declared_size_is_refused(
    tmp_path: Path, compression: int
) -> None:
    path = script_zip(tmp_path / "liar.pt", padded(64 * MIB), compression=compression)
    declare_size(path, CODE, len(HEADER))

    def open_it() -> None:
        with pytest.raises(ArchiveError, match="inflates past the") as caught:
            PytorchReader(path)
        assert (caught.value.entry, caught.value.path) == (CODE, str(path))

    assert peak_of(open_it) < bound(compression)


def test_headers_split_anywhere_read_the_same() -> None:
    source = HEADER + b"  def forward(self):\n    w : Tensor\nclass Plain:\n  t : Tensor"
    whole = parse_class_headers([source], CODE, None)
    assert whole == {
        "Net": ClassHeader(True, ("w",), (), frozenset({"w"})),
        "Plain": ClassHeader(False, (), (), frozenset({"t"})),
    }
    assert parse_class_headers((source[i : i + 1] for i in range(len(source))), CODE, None) == (
        whole
    )


def test_many_lines_of_a_code_file_stay_in_re() -> None:
    lines = b"x\n" * (MAX_CODE_SIZE // 2)  # top-level statements, each ending no class
    chunks = (lines[i : i + 2**16] for i in range(0, len(lines), 2**16))
    assert peak_of(lambda: parse_class_headers(chunks, CODE, None)) < PEAK_BOUND


# -- small records and data.pkl -----------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("member", ["byteorder", "version", ".format_version", "data.pkl"])
def test_a_member_that_inflates_past_its_declared_size_is_refused(
    tmp_path: Path, compression: int, member: str
) -> None:
    path = tmp_path / "liar.pt"
    with zipfile.ZipFile(path, "w") as archive:
        if member != "data.pkl":
            archive.writestr("archive/data.pkl", ROOT)
        archive.writestr("archive/data/0", TWO_FLOATS)
        archive.writestr("archive/code/__torch__.py", HEADER)
        write_member(archive, f"archive/{member}", zeros(64 * MIB), compression)
    declare_size(path, f"archive/{member}", 6)

    def open_it() -> None:
        with pytest.raises(ArchiveError, match="inflates past the 6 bytes") as caught:
            PytorchReader(path)
        assert caught.value.entry == f"archive/{member}"

    assert peak_of(open_it) < bound(compression)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, *COMPRESSIONS])
def test_a_record_at_the_limit_reads_and_one_past_is_refused(
    tmp_path: Path, compression: int
) -> None:
    record = b"little".ljust(MAX_RECORD_SIZE)
    at = script_zip(tmp_path / "at.pt", [HEADER], records={"byteorder": ([record], compression)})
    with PytorchReader(at) as reader:
        assert reader.metadata().byte_order == "little"
    over = script_zip(
        tmp_path / "over.pt", [HEADER], records={"byteorder": ([record + b" "], compression)}
    )
    with pytest.raises(LimitExceeded) as caught:
        PytorchReader(over)
    assert (caught.value.found, caught.value.limit) == (MAX_RECORD_SIZE + 1, MAX_RECORD_SIZE)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, *COMPRESSIONS])
def test_a_member_that_fails_its_crc_is_refused(tmp_path: Path, compression: int) -> None:
    path = script_zip(tmp_path / "crc.pt", [HEADER], compression=compression)
    with zipfile.ZipFile(path) as archive:
        crc = archive.getinfo(CODE).CRC
    patch_directory(path, CODE, 16, crc ^ 1)
    with pytest.raises(ArchiveError, match="bad CRC-32") as caught:
        PytorchReader(path)
    assert caught.value.entry == CODE


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_member_that_ends_early_is_refused(tmp_path: Path, compression: int) -> None:
    path = script_zip(tmp_path / "short.pt", [HEADER], compression=compression)
    declare_size(path, CODE, len(HEADER) + 1)
    with pytest.raises(ArchiveError, match="inflates to 59 of the 60 declared") as caught:
        PytorchReader(path)
    assert caught.value.entry == CODE


# -- the CLI ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda path: script_zip(path, padded(MAX_CODE_SIZE + 1)), 2),
        (lambda path: script_zip(path, [HEADER]), 0),
    ],
    ids=["over", "within"],
)
def test_inspect_reports_a_code_bomb_in_one_line(
    tmp_path: Path, capsys: Any, make: Callable[[Path], Path], code: int
) -> None:
    path = make(tmp_path / "code.pt")
    assert cli.main(["inspect", str(path)]) == code  # 2: the file is refused
    err = capsys.readouterr().err
    if code:
        assert err.count("weightstore: error:") == 1 and len(err.splitlines()) == 1
        assert "TorchScript code" in err and str(path) in err
    else:
        assert "error" not in err
