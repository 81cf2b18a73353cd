"""What a PyTorch checkpoint holds besides tensors: its objects as JSON, and the globals it names.

The PyTorch reader decodes a pickle without running it: a class or function it does not know
becomes a `GlobalRef`, and a call to one an `InertObject` (`weightstore.pytorch_reader`). Nothing
ran, but ``torch.load(weights_only=False)`` on the same file *would* import and call those
names. Which ones count as running code, and which are a user's inert classes, is the reader's
policy (`weightstore.pytorch_reader._policy`, re-exported here with its scan); the commands
refuse the first kind and list the second.

`to_json` turns decoded values into JSON types (numbers stay numbers), bounded in depth, items
and string length, since a file supplies them.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, Final

from weightstore.base._lazy import import_on_first_use
from weightstore.cli._text import MAX_TEXT_LEN, json_number, shortened
from weightstore.pytorch_reader import (
    GlobalRef,
    InertObject,
    LazyTensor,
    TorchDevice,
    TorchDType,
    UnreadableTensor,
)
from weightstore.pytorch_reader._policy import (
    MAX_SCAN_DEPTH,
    MAX_SCAN_NODES,
    FoundGlobal,
    Scan,
    is_object_class,
    key_text,
    runs_code,
    scan_globals,
)

if TYPE_CHECKING:
    import numpy as np
else:
    np = import_on_first_use("numpy", globals(), "np")  # inspect of a header needs no NumPy

__all__ = [
    "MAX_SCAN_DEPTH",
    "MAX_SCAN_NODES",
    "FoundGlobal",
    "Scan",
    "describe_value",
    "is_object_class",
    "runs_code",
    "scan_globals",
    "to_json",
]

_MAX_JSON_DEPTH: Final = 6  # nesting shown in JSON; deeper values become "..."
_MAX_JSON_ITEMS: Final = 50  # items shown per container
_MAX_JSON_NODES: Final = 5_000  # values shown per object, all levels together
_MAX_JSON_TEXT: Final = 5 * MAX_TEXT_LEN  # characters of one string
_MAX_EXACT_INT_BITS: Final = 64  # larger ints are shown in hex: str() of a huge int is refused


# -- JSON ---------------------------------------------------------------------------------------


class _Budget:
    """Values `to_json` may still render for one object."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes

    def take(self) -> bool:
        self.nodes -= 1
        return self.nodes >= 0


def to_json(value: object) -> Any:
    """`value` (as the PyTorch reader decodes it) as JSON types, bounded in size.

    Numbers stay numbers (non-finite floats become ``"NaN"``/``"Infinity"``), strings are cut at
    1,000 characters, containers at 50 items and 6 levels; what was cut reads ``"..."``.
    Non-plain values are tagged objects: ``{"object": "posix.system", "args": [...]}``,
    ``{"global": ...}``, ``{"tensor": ...}``, ``{"array": ...}``, ``{"bytes": <size>}``.
    """
    return _json(value, _MAX_JSON_DEPTH, _Budget(_MAX_JSON_NODES))


def _json(value: object, depth: int, budget: _Budget) -> Any:
    if not budget.take():
        return "..."
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | str | int | float):
        return _json_scalar(value)
    tagged = _json_tagged(value)
    if tagged is not None:
        return tagged
    if depth <= 0:
        return "..."
    if isinstance(value, dict | argparse.Namespace):
        pairs = value.items() if isinstance(value, dict) else vars(value).items()
        head, more = _first(pairs)
        shown = {key_text(k): _json(v, depth - 1, budget) for k, v in head}
        return {**shown, "...": f"{more:,} more"} if more else shown
    if isinstance(value, list | tuple | set | frozenset):
        items, more = _first(value)
        return [_json(item, depth - 1, budget) for item in items] + (["..."] if more else [])
    if isinstance(value, InertObject):
        return _json_inert(value, depth, budget)
    return {"value": type(value).__name__}


def _json_scalar(value: bool | str | int | float | None) -> Any:
    if isinstance(value, str):
        return value if len(value) <= _MAX_JSON_TEXT else value[: _MAX_JSON_TEXT - 3] + "..."
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value.bit_length() <= _MAX_EXACT_INT_BITS else hex(value)
    return value


def _json_tagged(value: object) -> Any:
    """The tagged form of a leaf that is not a plain JSON value, or None."""
    if isinstance(value, GlobalRef):
        return {"global": value.qualname}
    if isinstance(value, LazyTensor):
        return {"tensor": {"dtype": value.torch_dtype, "shape": list(value.shape)}}
    if isinstance(value, UnreadableTensor):
        return {"unreadable_tensor": value.global_name}
    if isinstance(value, np.ndarray):
        return {"array": {"dtype": str(value.dtype), "shape": list(value.shape)}}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": len(value)}
    if isinstance(value, complex):
        return {"real": json_number(value.real), "imag": json_number(value.imag)}
    if isinstance(value, TorchDType | TorchDevice | slice | range):
        return str(value) if isinstance(value, TorchDevice) else repr(value)
    return None


def _json_inert(value: InertObject, depth: int, budget: _Budget) -> dict[str, Any]:
    document: dict[str, Any] = {"object": value.class_name}
    if value.args:
        document["args"] = _json(value.args, depth - 1, budget)
    if value.kwargs:
        document["kwargs"] = _json(value.kwargs, depth - 1, budget)
    if value.state is not None:
        document["state"] = _json(value.state, depth - 1, budget)
    if value.listitems:
        document["items"] = _json(value.listitems, depth - 1, budget)
    if value.dictitems:
        document["dictitems"] = _json(value.dictitems, depth - 1, budget)
    return document


def _first(items: Any) -> tuple[list[Any], int]:
    """The first `_MAX_JSON_ITEMS` of a sized collection, and how many more there are."""
    head: list[Any] = []
    for item in items:
        if len(head) == _MAX_JSON_ITEMS:
            break
        head.append(item)
    return head, len(items) - len(head)


def describe_value(value: object, limit: int = 60) -> str:
    """A one-line text form of a decoded value (its JSON form, compact), at most `limit`
    characters, printable."""
    text = json.dumps(to_json(value), ensure_ascii=False, separators=(", ", ": "))
    return shortened(text, limit)
