"""`weightstore.base._render.bounded_repr`: repr's text for small values, bounded work and
length for hostile ones (cycles, shared references, huge ints and strings)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import pytest

from weightstore.base._render import MAX_INT_BITS, MAX_REPR_SIZE, bounded_int, bounded_repr


@pytest.mark.parametrize(
    "value",
    [None, True, 3, -7, 0.5, 1j, "a'b", b"\x00x", [], (), {}, set(), frozenset(), [1, "a"], (1,),
     (1, 2), {"lr": 0.1}, {1}, frozenset({2}), [[1, 2], {"k": (3,)}], 2**255, bytearray(b"ab")],
)  # fmt: skip
def test_small_values_print_as_repr(value: object) -> None:
    assert bounded_repr(value) == repr(value)


def test_container_subclasses_print_as_their_builtin() -> None:
    assert bounded_repr(OrderedDict(a=1)) == "{'a': 1}"


def test_long_containers_show_a_few_items_and_a_count() -> None:
    assert bounded_repr(list(range(1000))) == "[0, 1, 2, 3, 4, 5, ... 994 more]"
    assert bounded_repr({i: i for i in range(10)}).endswith(", ... 4 more}")


def test_long_text_is_cut_to_the_limit() -> None:
    for value in ("x" * 10**6, b"y" * 10**6, ["z" * 10**6] * 3):
        text = bounded_repr(value)
        assert len(text) == MAX_REPR_SIZE and text.endswith("...")
    assert bounded_repr("x" * 10**6, limit=12) == "'xxxxxxxx..."


def test_huge_ints_print_their_size() -> None:
    assert bounded_repr(10**5000) == "<int of 16,610 bits>"  # str() refuses 5,001 digits
    assert bounded_repr(-(2**300)) == "<int of 301 bits>"


def test_counts_print_with_separators_until_too_wide() -> None:
    assert bounded_int(0) == "0" and bounded_int(-1234567) == "-1,234,567"
    assert bounded_int(2**MAX_INT_BITS - 1) == f"{2**MAX_INT_BITS - 1:,}"  # the widest shown
    assert bounded_int(2**MAX_INT_BITS) == f"<int of {MAX_INT_BITS + 1} bits>"
    assert bounded_int(10**5000) == "<int of 16,610 bits>"  # f"{:,}" refuses 5,001 digits


def test_errors_print_a_files_huge_numbers_as_their_size() -> None:
    from weightstore.errors import LimitExceeded, PickleError, RemoteReadError, TruncatedError

    huge = 10**5000
    assert "size is <int of 16,610 bits>, over the limit of 10" in str(
        LimitExceeded("size", huge, 10, path="f")
    )
    assert "needs <int of 16,610 bits> bytes but only 3" in str(TruncatedError("x", huge, 3))
    assert "at byte <int of 16,610 bits>" in str(PickleError("bad", offset=huge))
    assert "reading bytes [<int of" in str(RemoteReadError("u", huge, 1, "why"))


def test_cycles_print_as_an_ellipsis() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert bounded_repr(loop) == "[1, ...]"
    table: dict[str, Any] = {}
    table["self"] = table
    assert bounded_repr(table) == "{'self': ...}"


def test_shared_references_cost_bounded_work() -> None:
    graph: list[Any] = [0]
    for _ in range(60):  # 2**60 paths
        graph = [graph, graph]
    start = time.perf_counter()
    text = bounded_repr(graph, limit=10**6)
    assert time.perf_counter() - start < 1.0
    assert len(text) < 10**4  # MAX_REPR_NODES values at most
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert bounded_repr(deep, max_nodes=10**6).count("[") <= 10  # MAX_REPR_DEPTH, no recursion


def test_other_objects_print_their_type_or_the_hooks_text() -> None:
    assert bounded_repr(range(10**30)) == "<range>"  # len() overflows
    assert bounded_repr(range(5)) == "<range of 5>"
    assert bounded_repr([object()]) == "[<object>]"
    hook = bounded_repr([object(), 1], leaf=lambda value: "<thing>")
    assert hook == "[<thing>, 1]"


def test_error_messages_bound_the_tensor_name() -> None:
    from weightstore.errors import MAX_NAME_IN_MESSAGE, DescriptorError

    error = DescriptorError("bad", path="f.bpk", tensor="n" * 1_000_000)
    assert error.tensor == "n" * 1_000_000  # the field keeps the whole name
    assert len(str(error)) < MAX_NAME_IN_MESSAGE + 100
