"""The symbolic pickle machine (`_machine.py`): CPython's values, references, and refusals."""

from __future__ import annotations

import collections
import copyreg
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from tests.pytorch_reader._support import op_int, op_str, pickle_of
from weightstore.errors import (
    LimitExceeded,
    PickleError,
    TruncatedError,
    UnsupportedVersionError,
)
from weightstore.pytorch_reader import GlobalRef, InertObject, Limits
from weightstore.pytorch_reader._machine import run_pickle

PLAIN_VALUES: list[Any] = [
    0,
    1,
    -1,
    255,
    65_535,
    2**31,
    -(2**31) - 1,
    2**64,
    -(2**200),
    2 ** (8 * 300),
    0.0,
    -1.5,
    float("inf"),
    1e-300,
    "",
    "text",
    "ünïcødé \U0001f600",
    "x" * 300,
    b"",
    b"\x00\xff" * 200,
    bytearray(b"ab"),
    None,
    True,
    False,
    [],
    [1, [2, [3]]],
    (),
    (1,),
    (1, 2),
    (1, 2, 3),
    (1, 2, 3, 4),
    {},
    {"a": 1, 2: "b", (3, 4): [5], None: 0.5},
    set(),
    {1, "two", (3,)},
    frozenset({4, 5}),
    collections.OrderedDict([("x", 1), ("y", [2])]),
    slice(1, None, 3),
    range(2, 20, 4),
    complex(1.5, -2),
    [{"deep": [({"k": (1, 2)},)]}],
]


def load(data: bytes, **limits: int) -> Any:
    value, end, _ = run_pickle(data, limits=Limits(**limits))
    assert end == len(data)
    return value


@pytest.mark.parametrize("protocol", range(6))
@pytest.mark.parametrize("value", PLAIN_VALUES, ids=repr)
def test_plain_values_decode_as_cpython_decodes_them(protocol: int, value: Any) -> None:
    data = pickle.dumps(value, protocol=protocol)
    got = load(data)
    assert got == pickle.loads(data)
    assert type(got) is type(pickle.loads(data))


def test_memo_entries_are_shared_references() -> None:
    inner = [1, 2]
    got = load(pickle.dumps([inner, inner, {"again": inner}], protocol=2))
    assert got[0] is got[1] is got[2]["again"]


def test_a_list_may_hold_itself() -> None:
    loop: list[Any] = []
    loop.append(loop)
    got = load(pickle.dumps(loop, protocol=4))
    assert got[0] is got


def test_a_memo_bomb_costs_nothing_to_decode() -> None:
    # level n is [level n-1, level n-1]: 2**100 leaves described in ~600 bytes.
    body = b"]q\x00"
    for level in range(1, 101):
        body += b"(h" + bytes([(level - 1) % 256]) + b"h" + bytes([(level - 1) % 256]) + b"l"
        body += b"q" + bytes([level % 256])
    got = load(pickle_of(body))
    assert got[0] is got[1]


class WithKwargs:
    def __init__(self, a: int, *, b: int) -> None:
        self.a, self.b = a, b

    def __getnewargs_ex__(self) -> tuple[tuple[int], dict[str, int]]:
        return (self.a,), {"b": self.b}


def test_newobj_ex_records_class_args_kwargs_and_state() -> None:
    got = load(pickle.dumps(WithKwargs(1, b=2), protocol=4))
    assert isinstance(got, InertObject)
    assert got.callee == GlobalRef(__name__, "WithKwargs")
    assert (got.args, got.kwargs, got.how) == ((1,), {"b": 2}, "new")
    assert got.attributes == {"a": 1, "b": 2}


class Point:
    pass


@pytest.fixture
def extension_codes() -> Iterator[None]:
    for code in (240, 300, 70_000):
        copyreg.add_extension(__name__, "Point", code)
        copyreg.remove_extension(__name__, "Point", code)
    copyreg.add_extension(__name__, "Point", 240)
    yield
    copyreg.remove_extension(__name__, "Point", 240)


@pytest.mark.parametrize(("code", "opcode"), [(240, b"\x82"), (300, b"\x83"), (70_000, b"\x84")])
def test_extension_codes_resolve_to_nothing_runnable(code: int, opcode: bytes) -> None:
    width = {b"\x82": 1, b"\x83": 2, b"\x84": 4}[opcode]
    data = pickle_of(opcode + code.to_bytes(width, "little") + b")R")
    got = load(data)
    assert isinstance(got, InertObject)
    assert got.callee == GlobalRef("copyreg.extension_registry", str(code))


def test_a_registered_extension_pickle_reads(extension_codes: None) -> None:
    data = pickle.dumps(Point(), protocol=2)
    assert b"\x82\xf0" in data  # EXT1 240
    got = load(data)
    assert isinstance(got, InertObject)
    assert got.class_name == "copyreg.extension_registry.240"


def test_persistent_ids_go_to_the_layout() -> None:
    seen: list[object] = []

    def persistent_load(pid: object) -> object:
        seen.append(pid)
        return f"resolved {pid}"

    text_form = b"Pkey-1\n."  # PERSID, protocol 0
    binary_form = pickle_of(op_str("key-2") + b"Q")
    assert run_pickle(text_form, persistent_load=persistent_load)[0] == "resolved key-1"
    assert run_pickle(binary_form, persistent_load=persistent_load)[0] == "resolved key-2"
    assert seen == ["key-1", "key-2"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"(I1\nI2\nibuiltins\nslice\n.", slice(1, 2)),  # INST
        (b"(cbuiltins\nslice\nI1\nI2\no.", slice(1, 2)),  # OBJ
        (b"\x80\x02K\x01K\x020.", 1),  # POP
        (b"\x80\x02K\x052\x86.", (5, 5)),  # DUP
        (b"\x80\x02K\x07(K\x01K\x021.", 7),  # POP_MARK
        (b"\x80\x02K\x07(0.", 7),  # POP on an empty stack drops the mark
        (b"\x80\x05\x96\x02\x00\x00\x00\x00\x00\x00\x00ab\x98.", b"ab"),  # READONLY_BUFFER
        (b"(I1\nI2\nl(dS'k'\nI00\ns.", {"k": False}),  # protocol 0 dict, 00 is False
    ],
)
def test_rare_opcodes(data: bytes, expected: object) -> None:
    assert load(data) == expected


def test_out_of_band_buffers_are_refused() -> None:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(pickle.PickleBuffer(b"abc"), protocol=5, buffer_callback=buffers.append)
    with pytest.raises(PickleError, match="out-of-band") as caught:
        load(data)
    assert caught.value.opcode == "NEXT_BUFFER"


@pytest.mark.parametrize(
    ("data", "opcode", "offset", "fragment"),
    [
        (b"\x80\x02.", "STOP", 2, "stack is empty"),
        (b"\x80\x02h\x05.", "BINGET", 2, "never stored"),
        (b"\x80\x02j\x05\x00\x00\x00.", "LONG_BINGET", 2, "memo entry 5 was never stored"),
        (b"\x80\x02q\x00.", "BINPUT", 2, "stack is empty"),
        (b"\x80\x02t.", "TUPLE", 2, "no MARK"),
        (b"\x80\x02K\x01)R.", "REDUCE", 5, "not callable"),
        (b"\x80\x02}]K\x01s.", "SETITEM", 6, "cannot be a dict key"),
        (b"\x80\x02K\x01}b.", "BUILD", 5, "cannot set state"),
        (b"\x80\x02}(K\x01u.", "SETITEMS", 6, "odd number"),
        (b"\x80\x02K\x01K\x02a.", "APPEND", 6, "cannot append"),
        (b"\x80\x02\xfe.", None, 2, "not a pickle opcode"),
        (b"\x80\x02K\x01\x93.", "STACK_GLOBAL", 4, "stack is empty"),
        (b"\x80\x02K\x01K\x02\x93.", "STACK_GLOBAL", 6, "both str"),
        (b"\x80\x02Pid\n.", "PERSID", 2, "no storages"),
    ],
)
def test_malformed_streams_name_opcode_and_offset(
    data: bytes, opcode: str | None, offset: int, fragment: str
) -> None:
    with pytest.raises(PickleError) as caught:
        load(data)
    assert (caught.value.opcode, caught.value.offset) == (opcode, offset)
    assert fragment in caught.value.detail


def test_a_newer_protocol_is_refused() -> None:
    with pytest.raises(UnsupportedVersionError) as caught:
        load(b"\x80\x06N.")
    assert (caught.value.found, caught.value.supported) == (6, 5)


@pytest.mark.parametrize("data", [b"\x80\x02N", b"\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N."])
def test_a_stream_ending_early_is_truncated(data: bytes) -> None:
    with pytest.raises(TruncatedError):
        load(data)


@pytest.mark.parametrize(("data", "offset"), [(b"\x80\x02Nq", 4), (b"\x80\x02h", 3), (b"\x80", 1)])
def test_a_one_byte_argument_cut_off_names_where(data: bytes, offset: int) -> None:
    with pytest.raises(TruncatedError) as caught:
        load(data)
    assert f"uint1 at byte {offset}" in str(caught.value)


# -- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "limits", "what"),
    [
        (pickle_of(b"N\x94" * 20), {"max_memo_size": 10}, "memo size"),
        (pickle_of(b"N" * 100), {"max_stack_size": 50}, "pickle stack size"),
        (pickle_of(b"(" * 300), {}, "open MARK depth"),
        (pickle_of(b"(" + b"N" * 20 + b"l"), {"max_container_size": 10}, "container size"),
        (pickle_of(b"]" + b"Na" * 20), {"max_container_size": 10}, "container size"),
        (
            pickle_of(b"}" + b"(" + b"".join(op_int(i) + b"N" for i in range(20)) + b"u"),
            {"max_container_size": 10},
            "container size",
        ),
        (pickle_of(b"N0" * 200), {"max_nodes": 100}, "work"),
    ],
)
def test_limits_stop_a_greedy_stream(data: bytes, limits: dict[str, int], what: str) -> None:
    with pytest.raises(LimitExceeded) as caught:
        load(data, **limits)
    assert caught.value.what.startswith(what)
    assert caught.value.found > caught.value.limit


def test_a_deep_tuple_key_is_refused_not_hashed() -> None:
    # CPython hashes nested tuples recursively in C; 100,000 levels would crash the process.
    data = pickle_of(b"}N" + b"\x85" * 100_000 + b"Ns")
    with pytest.raises(LimitExceeded) as caught:
        load(data)
    assert caught.value.what == "nesting depth of a dict key"


def test_a_shared_tuple_key_is_charged_by_its_paths() -> None:
    # level n is (level n-1, level n-1): hashing it costs 2**60 steps.
    body = b")q\x000"
    for level in range(1, 61):
        previous = bytes([level - 1])
        body += b"h" + previous + b"h" + previous + b"\x86q" + bytes([level]) + b"0"
    with pytest.raises(LimitExceeded) as caught:
        load(pickle_of(body + b"}h\x3cNs"), max_nodes=100_000)
    assert caught.value.what.startswith("work")


def test_keys_sharing_one_hash_are_capped() -> None:
    # Every int k * (2**61 - 1) hashes to 0: a dict of them costs quadratic time to build.
    pairs = b"".join(op_int(k * (2**61 - 1)) + b"N" for k in range(1, 100))
    with pytest.raises(LimitExceeded) as caught:
        load(pickle_of(b"}(" + pairs + b"u"))
    assert caught.value.what == "count of dict keys sharing one hash value"


def test_ordinary_int_keys_are_not_slowed_or_refused() -> None:
    value = {i: [i] for i in range(5000)}
    assert load(pickle.dumps(value, protocol=2)) == value
