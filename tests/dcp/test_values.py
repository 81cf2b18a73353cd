"""Non-tensor values of a checkpoint: ``torch.save`` bytes decoded by weightstore's own pickle
machine into plain values, stored as tagged JSON, and refused (with nothing run) when they are
anything else. torch writes the bytes, as DCP's planner does."""

from __future__ import annotations

import collections
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from weightstore.dcp import _values as _dcp_values
from weightstore.dcp._values import (
    MAX_HASH_SHARERS,
    MAX_VALUE_NODES,
    OpaqueValue,
    decode_saved_value,
    from_json,
    to_json,
)
from weightstore.errors import LimitExceeded, SetError

torch = pytest.importorskip("torch")


def saved(value: object) -> bytes:
    """What DCP's planner hands a storage writer for `value`."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def stored(value: object) -> object:
    """`value` through the JSON the index holds, and back."""
    text = json.dumps(to_json(value, "k"), allow_nan=False)
    return from_json(json.loads(text), "k", "index.json")


PLAIN: list[object] = [
    None,
    True,
    0,
    -(2**70),
    1.5,
    math.inf,
    -math.inf,
    "text é",
    b"\x00\xff",
    [1, [2, [3]]],
    (0.9, 0.999),
    (),
    {"lr": 0.1, 3: None, (1, 2): b"x", None: [True]},
    [{"nested": ({"deep": ()},)}],
]


@pytest.mark.parametrize("value", PLAIN, ids=lambda v: type(v).__name__)
def test_plain_values_decode_and_store_as_they_were(value: object) -> None:
    decoded = decode_saved_value(saved(value), "k")
    assert decoded == value and type(decoded) is type(value)
    back = stored(decoded)
    assert back == value and type(back) is type(value)


def test_nan_keeps_its_type_through_json() -> None:
    back = stored(decode_saved_value(saved(float("nan")), "k"))
    assert isinstance(back, float) and math.isnan(back)


def test_an_ordered_dict_and_a_torch_size_become_their_plain_forms() -> None:
    assert type(decode_saved_value(saved(collections.OrderedDict(a=1)), "k")) is dict
    assert decode_saved_value(saved(torch.Size([2, 3])), "k") == (2, 3)


class Marker:
    """Unpickling it would create a file: proof that something ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ({1, 2}, "of type set"),
        (torch.float16, "of type TorchDType"),
        (torch.ones(2), "a tensor"),
        ([1, torch.ones(1)], "a tensor"),
        (bytearray(b"x"), "of type bytearray"),
        (1 + 2j, "of type complex"),
    ],
    ids=["set", "dtype", "tensor", "tensor-inside", "bytearray", "complex"],
)
def test_anything_else_is_refused_naming_the_key(value: object, shown: str) -> None:
    with pytest.raises(SetError, match=shown) as caught:
        decode_saved_value(saved(value), "optim.extra", path="ckpt")
    assert caught.value.tensor == "optim.extra" and caught.value.path == "ckpt"
    assert "allow_opaque_values=True" in str(caught.value)


def test_a_hostile_value_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(SetError, match=r"<inert io\.open object>"):
        decode_saved_value(saved(Marker(str(marker))), "evil")
    assert not marker.exists()


def _bomb() -> bytes:
    value: list[object] = [1]
    for _ in range(30):  # 2**30 leaves once written out, from 31 objects
        value = [value, value]
    return saved(value)


def test_shared_references_are_counted_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dcp_values, "MAX_VALUE_NODES", 10_000)  # the rule, at a lower limit
    with pytest.raises(SetError, match="over 10,000 items"):
        decode_saved_value(_bomb(), "bomb")


@pytest.mark.slow
def test_shared_references_stop_at_the_node_limit() -> None:
    with pytest.raises(SetError, match=f"over {MAX_VALUE_NODES:,} items"):
        decode_saved_value(_bomb(), "bomb")


def test_a_value_that_contains_itself_is_refused() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(SetError, match="nests deeper"):
        decode_saved_value(saved(loop), "loop")


@pytest.mark.parametrize(
    "data", [b"", b"not a zip", b"PK\x03\x04" + bytes(40)], ids=["empty", "text", "broken-zip"]
)
def test_bytes_that_are_no_torch_save_are_refused(data: bytes) -> None:
    with pytest.raises(SetError, match=r"torch\.save") as caught:
        decode_saved_value(data, "k")
    assert caught.value.tensor == "k"


def test_opaque_bytes_are_kept_verbatim_and_marked() -> None:
    raw = saved({1, 2})
    form = to_json(OpaqueValue(raw), "k")
    assert isinstance(form, dict) and list(form) == ["$opaque"]
    assert stored(OpaqueValue(raw)) == OpaqueValue(raw)


@pytest.mark.parametrize(
    ("form", "why"),
    [
        ({"$set": [1]}, "tag '\\$set' is not one of"),
        ({"$tuple": [1], "$bytes": ""}, "exactly one tag"),
        ({}, "exactly one tag"),
        ({"$bytes": "not base64!"}, "not valid base64"),
        ({"$float": "1.5"}, "is not one of"),
        ({"$float": ["nan"]}, "is not one of"),  # the fuzzer's: an unhashable tag content
        ({"$float": {"a": 1}}, "is not one of"),
        ({"$tuple": "ab"}, "is not one of"),
        ({"$dict": [[[1], 2]]}, "cannot be hashed"),
        ({"$dict": [[1, 2], [1.0, 3]]}, "given twice"),
        ({"$dict": [[1]]}, "pairs"),
    ],
)
def test_a_stored_value_in_another_form_is_refused(form: object, why: str) -> None:
    with pytest.raises(SetError, match=why) as caught:
        from_json(form, "cfg.x", os.path.join("ckpt", "dcp.index.json"))
    assert caught.value.tensor == "cfg.x"


_COLLIDING = 2**61 - 1  # every multiple of it hashes to 0, as CPython hashes ints


@pytest.mark.parametrize("count", [MAX_HASH_SHARERS, MAX_HASH_SHARERS + 1])
def test_dict_keys_sharing_one_hash_are_bounded(count: int) -> None:
    form = {"$dict": [[i * _COLLIDING, i] for i in range(1, count + 1)]}
    if count <= MAX_HASH_SHARERS:
        assert len(from_json(form, "k", "i.json")) == count  # type: ignore[arg-type]
        return
    with pytest.raises(LimitExceeded, match="sharing one hash value") as caught:
        from_json(form, "opt.state", "i.json")
    assert caught.value.limit == MAX_HASH_SHARERS and caught.value.tensor == "opt.state"


def test_keys_that_never_collide_are_not_counted() -> None:
    keys: list[object] = [*range(-5_000, 5_000), 2**61 - 2, -(2**61) + 2, *map(str, range(500))]
    form = {"$dict": [[k, None] for k in keys]}
    assert list(from_json(form, "k", "i.json")) == keys  # type: ignore[call-overload]
    # Tuples and floats are counted: (k * m,) tuples collide as their items do.
    tuples = {"$dict": [[{"$tuple": [i * _COLLIDING]}, 0] for i in range(1, 100)]}
    with pytest.raises(LimitExceeded):
        from_json(tuples, "k", "i.json")


def test_a_stored_value_holds_at_most_the_node_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dcp_values, "MAX_VALUE_NODES", 10)  # the rule, at a lower limit
    assert from_json(list(range(9)), "k", "i.json") == list(range(9))  # 10 values, the list too
    with pytest.raises(SetError, match="over 10 items"):
        from_json(list(range(10)), "k", "i.json")
