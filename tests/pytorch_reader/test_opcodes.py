"""The opcode table (`_opcodes.py`): complete, in step with CPython's, and its readers safe."""

from __future__ import annotations

import pickle
import pickletools

import pytest

from weightstore.errors import LimitExceeded, PickleError, TruncatedError
from weightstore.pytorch_reader import OPCODES, iter_ops
from weightstore.pytorch_reader._layout import MAX_LONG_SIZE
from weightstore.pytorch_reader._opcodes import OPCODES_BY_CODE, Stream


def test_table_matches_pickletools_row_for_row() -> None:
    ours = {op.name: op for op in OPCODES}
    theirs = {op.name: op for op in pickletools.opcodes}
    assert set(ours) == set(theirs)
    for name, op in theirs.items():
        mine = ours[name]
        assert mine.code == ord(op.code), name
        assert mine.proto == op.proto, name
        assert (mine.arg.name if mine.arg else None) == (op.arg.name if op.arg else None), name


def test_every_code_is_indexed_once() -> None:
    assert len(OPCODES_BY_CODE) == len(OPCODES) == 68


@pytest.mark.parametrize("protocol", range(6))
def test_iter_ops_agrees_with_genops(protocol: int) -> None:
    value = {"a": [1, 2.5, "x", b"y", None, True], ("t", 1): {3, 4}, "n": -(2**70)}
    data = pickle.dumps(value, protocol=protocol)
    ours = [(op.name, _text(arg), pos) for op, arg, pos in iter_ops(data)]
    theirs = [(op.name, arg, pos) for op, arg, pos in pickletools.genops(data)]
    assert ours == theirs


def _text(arg: object) -> object:
    """pickletools shows GLOBAL's (module, name) pair as one space-joined string."""
    return " ".join(arg) if isinstance(arg, tuple) else arg


def test_iter_ops_reads_a_literal() -> None:
    data = bytes.fromhex("80 02 4b 07 2e")  # PROTO 2, BININT1 7, STOP
    assert [(op.name, arg, pos) for op, arg, pos in iter_ops(data)] == [
        ("PROTO", 2, 0),
        ("BININT1", 7, 2),
        ("STOP", None, 4),
    ]


def test_an_unknown_byte_is_named() -> None:
    with pytest.raises(PickleError) as caught:
        list(iter_ops(b"\x80\x02\xff."))
    assert caught.value.offset == 2
    assert "0xff" in caught.value.detail


@pytest.mark.parametrize(
    "data",
    [
        bytes.fromhex("58 ff ff ff ff 61 62"),  # BINUNICODE claims 4 GiB, 2 bytes follow
        bytes.fromhex("8e ff ff ff ff ff ff ff 7f"),  # BINBYTES8 claims 2**63 - 1 bytes
        bytes.fromhex("8b a0 06 00 00"),  # LONG4 claims 1,696 bytes (longer: LimitExceeded)
        bytes.fromhex("4a 01 02"),  # BININT cut short
    ],
)
def test_claimed_lengths_are_checked_before_allocating(data: bytes) -> None:
    with pytest.raises(TruncatedError) as caught:
        list(iter_ops(data))
    assert caught.value.found < 8


def test_a_long4_past_max_long_size_is_refused_before_reading() -> None:
    with pytest.raises(LimitExceeded) as caught:
        list(iter_ops(bytes.fromhex("8b 00 00 00 40")))  # LONG4 claims 1 GiB of digits
    assert (caught.value.found, caught.value.limit) == (2**30, MAX_LONG_SIZE)


def test_a_negative_length_is_refused() -> None:
    with pytest.raises(PickleError, match="negative length"):
        list(iter_ops(bytes.fromhex("54 ff ff ff ff")))  # BINSTRING with length -1


def test_a_text_number_longer_than_cpython_allows_is_refused() -> None:
    data = b"I" + b"9" * 5000 + b"\n."
    with pytest.raises(LimitExceeded):
        list(iter_ops(data))


def test_quoted_strings_decode_escapes() -> None:
    stream = Stream(b"'a\\x41\\n'\n")
    reader = OPCODES_BY_CODE[ord("S")].arg
    assert reader is not None
    assert reader.read(stream) == "aA\n"
    with pytest.raises(PickleError, match="not quoted"):
        reader.read(Stream(b"abc\n"))
