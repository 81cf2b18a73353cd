"""The non-tensor values of a distributed checkpoint, as plain data and never as a pickle.

torch.distributed.checkpoint hands a storage writer every non-tensor value of a state dict (a
learning rate, an epoch, a list of parameter names) as the bytes of ``torch.save(value)``, and
its planner reads them back with ``torch.load(..., weights_only=False)``: whoever wrote the
checkpoint chooses what runs on load. Here those bytes are decoded by weightstore's own
symbolic pickle machine (`weightstore.pytorch_reader`), which imports and calls nothing, into
*plain values*:

    None, bool, int, float, str, bytes, and lists, tuples and dicts of plain values
    (``OrderedDict`` becomes ``dict``; dict keys are plain values that hash)

Anything else (a tensor, a set, a dtype, an instance of some class) is refused naming its key;
`OpaqueValue` keeps the raw bytes instead, but only when a caller asks for it by name.

Plain values are stored as tagged JSON, one form per type, so a value reads back with the type
it was saved with::

    null, true, 3, "text", [..]          None, bool, int, str, list
    1.5  or  {"$float": "nan"}           float ("nan", "inf", "-inf": JSON has no such numbers)
    {"$tuple": [..]}                     tuple
    {"$bytes": "<base64>"}               bytes
    {"$dict": [[key, value], ..]}        dict (keys need not be strings)
    {"$opaque": "<base64>"}              an `OpaqueValue`: torch.save bytes, kept verbatim

`from_json` reads that form back as hostile input: an object with any other key, a key given
twice, a non-hashable dict key or malformed base64 is a `SetError`.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import zipfile
from collections.abc import Mapping
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.errors import LimitExceeded, SetError, WeightstoreError

__all__ = [
    "MAX_HASH_SHARERS",
    "MAX_VALUE_NODES",
    "MAX_VALUE_SIZE",
    "OpaqueValue",
    "decode_saved_value",
    "from_json",
    "to_json",
]

MAX_VALUE_SIZE: Final = 64 * 2**20
"""Bytes of one ``torch.save`` payload decoded: a value this large is no hyperparameter."""
MAX_VALUE_NODES: Final = 1_000_000
"""Values one decoded value may hold, counting shared ones each time: a pickle can reference
one list from many places, and JSON would write it out every time."""
MAX_VALUE_DEPTH: Final = 64
"""Nesting levels of one value; also stops a value that contains itself."""
MAX_HASH_SHARERS: Final = 64
"""Distinct keys of one stored dict with one hash value: ints ``k * (2**61 - 1)`` all hash
alike, and 40,000 of them made building the dict quadratic (50 s). Strings and bytes hash with
a per-process random seed and ints below 2**61 in size to themselves, so neither is counted."""

_SCALARS: Final = (bool, int, float, str, bytes)  # exact types: no subclass is plain
_TAGS: Final = ("$float", "$tuple", "$bytes", "$dict", "$opaque")
_NON_FINITE: Final = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_HASH_MODULUS: Final = 2**61 - 1  # ints below it in size hash to themselves
_SHOWN: Final = 80  # characters of a refused value in a message


class OpaqueValue(ValueRecord):
    """A value that is no plain value, kept as the ``torch.save`` bytes it arrived as.

    Written only by a writer created with ``allow_opaque_values=True``, and handed back to a
    planner (which unpickles it, running whatever it names) only by a reader created so too.

    Attributes:
        data: the ``torch.save`` bytes.
    """

    data: bytes

    def __init__(self, data: bytes) -> None:
        super().__init__(bytes(data))

    def __reduce__(self) -> tuple[type[OpaqueValue], tuple[bytes]]:
        # Records refuse attribute assignment, so pickle (which a distributed save uses to
        # send values to the coordinator) rebuilds one through its constructor.
        return (OpaqueValue, (self.data,))

    def __repr__(self) -> str:
        return f"OpaqueValue(<{len(self.data):,} bytes of torch.save output>)"


# -- torch.save bytes -> plain value --------------------------------------------------------------


class _HoldsStorage(Exception):
    """The pickle names a tensor storage: the value holds a tensor."""


def _refuse_storage(pid: object) -> object:
    raise _HoldsStorage


def decode_saved_value(data: bytes, key: str, *, path: str | None = None) -> object:
    """The plain value that ``torch.save`` wrote as `data`, decoded without unpickling.

    Args:
        data: the bytes of ``torch.save(value)`` (the zip layout torch writes by default).
        key: the value's key in the state dict, for messages.
        path: the checkpoint the value belongs to, for messages.

    Raises:
        SetError: the bytes are not a torch.save zip, or the value is no plain value (a
            tensor, a set, an object of a class); the message names `key` and what was found.
    """
    from weightstore.pytorch_reader._layout import DEFAULT_LIMITS
    from weightstore.pytorch_reader._machine import run_pickle

    pickled = _data_pkl(data, key, path)
    try:
        value, _, _ = run_pickle(
            pickled, path=path, limits=DEFAULT_LIMITS, persistent_load=_refuse_storage
        )
    except _HoldsStorage:
        raise _not_plain(key, path, "a tensor (tensors are saved as tensors, not values)") from None
    except WeightstoreError as err:
        raise SetError(
            f"value is not a pickle torch wrote: {err.detail}", path=path, tensor=key
        ) from err
    return _plain(value, key, path)


def _data_pkl(data: bytes, key: str, path: str | None) -> bytes:
    """The ``<archive>/data.pkl`` record of a torch.save zip, refusing one with storages."""
    if len(data) > MAX_VALUE_SIZE:
        raise SetError(
            f"value is {len(data):,} bytes of torch.save output, over the limit of "
            f"{MAX_VALUE_SIZE:,}",
            path=path,
            tensor=key,
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            pickles = [info for info in infos if info.filename.endswith("/data.pkl")]
            if len(pickles) != 1 or pickles[0].file_size > MAX_VALUE_SIZE:
                raise SetError(
                    "value is not torch.save output: expected one data.pkl record",
                    path=path,
                    tensor=key,
                )
            prefix = pickles[0].filename[: -len("data.pkl")]
            if any(info.filename.startswith(f"{prefix}data/") for info in infos):
                raise _not_plain(key, path, "a tensor (its storage is in the archive)")
            return archive.read(pickles[0])
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as err:
        if isinstance(err, WeightstoreError):
            raise
        raise SetError(
            f"value is not the zip archive torch.save writes: {err}", path=path, tensor=key
        ) from None


def _not_plain(key: str, path: str | None, found: str) -> SetError:
    return SetError(
        f"value is {found}; a checkpoint stores None, bool, int, float, str, bytes and lists, "
        "tuples and dicts of those (pass allow_opaque_values=True to keep other values as "
        "torch.save bytes, which load only with the same opt-in)",
        path=path,
        tensor=key,
    )


class _Budget:
    """Nodes left for one value (`MAX_VALUE_NODES`)."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_VALUE_NODES

    def spend(self, key: str, path: str | None) -> None:
        self.left -= 1
        if self.left < 0:
            raise SetError(
                f"value holds over {MAX_VALUE_NODES:,} items (shared ones counted each time)",
                path=path,
                tensor=key,
            )


def _plain(value: object, key: str, path: str | None) -> object:
    """`value`, as decoded by the pickle machine, checked and rebuilt from plain types only."""
    return _rebuilt(value, key, path, 0, _Budget())


def _rebuilt(value: object, key: str, path: str | None, depth: int, budget: _Budget) -> object:
    budget.spend(key, path)
    if depth > MAX_VALUE_DEPTH:
        raise SetError(
            f"value nests deeper than {MAX_VALUE_DEPTH} levels (or contains itself)",
            path=path,
            tensor=key,
        )
    if value is None or type(value) in _SCALARS:
        return value
    if type(value) is list or type(value) is tuple:  # torch.Size arrives as a tuple
        items = [_rebuilt(item, key, path, depth + 1, budget) for item in value]
        return items if type(value) is list else tuple(items)
    if isinstance(value, dict) and type(value).__module__ in ("builtins", "collections"):
        rebuilt: dict[object, object] = {}
        for item_key, item in value.items():
            new_key = _rebuilt(item_key, key, path, depth + 1, budget)
            rebuilt[new_key] = _rebuilt(item, key, path, depth + 1, budget)
        return rebuilt
    from weightstore.pytorch_reader._walk import short_repr  # names inert objects' classes

    raise _not_plain(key, path, f"{short_repr(value, _SHOWN)}, of type {type(value).__name__}")


# -- plain value <-> tagged JSON ------------------------------------------------------------------


def to_json(value: object, key: str) -> object:
    """`value` (a plain value or an `OpaqueValue`) in the tagged JSON form of the module
    docstring, ready for `json.dumps(..., allow_nan=False)`.

    Raises:
        SetError: `value` holds something that is no plain value (a caller's bug: values come
            from `decode_saved_value`).
    """
    return _encoded(value, key, 0)


def _encoded(value: object, key: str, depth: int) -> object:
    if depth > MAX_VALUE_DEPTH:
        raise SetError(f"value nests deeper than {MAX_VALUE_DEPTH} levels", tensor=key)
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if value is None or type(value) in (bool, int, str):
        return value
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, list):
        return [_encoded(item, key, depth + 1) for item in value]
    if isinstance(value, tuple):
        return {"$tuple": [_encoded(item, key, depth + 1) for item in value]}
    if isinstance(value, dict):
        pairs = value.items()
        return {
            "$dict": [[_encoded(k, key, depth + 1), _encoded(v, key, depth + 1)] for k, v in pairs]
        }
    if isinstance(value, OpaqueValue):
        return {"$opaque": base64.b64encode(value.data).decode("ascii")}
    raise _not_plain(key, None, f"of type {type(value).__name__}")


def from_json(value: object, key: str, path: str) -> object:
    """The value that `to_json` stored as `value` (decoded JSON from an index).

    Raises:
        SetError: not the tagged form: an object with another key or several keys, a tag
            whose content has the wrong type, bad base64, a dict key that cannot be hashed or
            is given twice, nesting deeper than `MAX_VALUE_DEPTH`, more than `MAX_VALUE_NODES`
            values (what `decode_saved_value` allows a saved one).
        LimitExceeded: a dict with more than `MAX_HASH_SHARERS` keys of one hash value.
    """
    return _decoded(value, key, path, 0, _Budget())


def _decoded(value: object, key: str, path: str, depth: int, budget: _Budget) -> object:
    budget.spend(key, path)
    if depth > MAX_VALUE_DEPTH:
        raise SetError(f"value nests deeper than {MAX_VALUE_DEPTH} levels", path=path, tensor=key)
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, list):
        return [_decoded(item, key, path, depth + 1, budget) for item in value]
    if not isinstance(value, Mapping) or len(value) != 1:
        raise _bad_form(key, path, "an object holds exactly one tag")
    ((tag, content),) = value.items()
    if tag == "$float" and isinstance(content, str) and content in _NON_FINITE:
        return _NON_FINITE[content]
    if tag == "$tuple" and isinstance(content, list):
        return tuple(_decoded(item, key, path, depth + 1, budget) for item in content)
    if tag in ("$bytes", "$opaque") and isinstance(content, str):
        data = _base64(content, key, path)
        return data if tag == "$bytes" else OpaqueValue(data)
    if tag == "$dict" and isinstance(content, list):
        return _decoded_dict(content, key, path, depth, budget)
    shown = bounded_repr(tag, limit=_SHOWN)
    raise _bad_form(key, path, f"tag {shown} is not one of {', '.join(_TAGS)} with its content")


def _decoded_dict(
    pairs: list[object], key: str, path: str, depth: int, budget: _Budget
) -> dict[object, object]:
    result: dict[object, object] = {}
    sharers: dict[int, list[object]] = {}  # hash -> the distinct keys with it, when counted
    for pair in pairs:
        if not isinstance(pair, list) or len(pair) != 2:
            raise _bad_form(key, path, '"$dict" holds [key, value] pairs')
        item_key = _decoded(pair[0], key, path, depth + 1, budget)
        _count_sharers(item_key, sharers, key, path)
        if item_key in result:
            shown = bounded_repr(item_key, limit=_SHOWN)
            raise _bad_form(key, path, f"dict key {shown} is given twice")
        result[item_key] = _decoded(pair[1], key, path, depth + 1, budget)
    return result


def _count_sharers(item_key: object, sharers: dict[int, list[object]], key: str, path: str) -> None:
    """Refuse a dict key that cannot be hashed, or the key past `MAX_HASH_SHARERS` with one
    hash value, before it is inserted (each insert compares it with every key of its hash)."""
    kind = type(item_key)
    if kind is str or kind is bytes:
        return
    if kind is int and -_HASH_MODULUS < item_key < _HASH_MODULUS:  # type: ignore[operator]
        return
    try:
        digest = hash(item_key)
    except TypeError:
        raise _bad_form(key, path, "a dict key is a list or dict, which cannot be hashed") from None
    group = sharers.setdefault(digest, [])
    if item_key not in group:
        group.append(item_key)
        if len(group) > MAX_HASH_SHARERS:
            raise LimitExceeded(
                "count of stored dict keys sharing one hash value",
                len(group),
                MAX_HASH_SHARERS,
                path=path,
                tensor=key,
            )


def _base64(text: str, key: str, path: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _bad_form(key, path, "bytes are not valid base64") from None


def _bad_form(key: str, path: str, why: str) -> SetError:
    return SetError(f"stored value is not in the index's value form: {why}", path=path, tensor=key)
