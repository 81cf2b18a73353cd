"""Plain dicts of NumPy arrays as models, for users without torch.

Nested dicts are walked and their keys joined with dots (``{"fc": {"weight": w}}`` is
``fc.weight``). Loading writes into the existing arrays in place when they are writable, so
references the caller holds see the new values (and one array under two keys stays shared);
read-only arrays are replaced in the dict. A dict has no migration hooks: spare source tensors
are left alone.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import numpy as np

from weightstore.bridge._model import READ_ERRORS, aliases_by_identity
from weightstore.dtypes import from_numpy
from weightstore.errors import InvalidOptionError
from weightstore.snapshot import TensorSnapshot
from weightstore.transfer._plan import LoadOutcome, LoadPlan, Target

__all__ = ["NumpyDictBridge"]

_CONTAINER = ("dict",)


class NumpyDictBridge:
    """Reads and writes a (nested) `dict[str, numpy.ndarray]`; a `ModelBridge`."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._slots: dict[str, tuple[MutableMapping[str, Any], str]] = dict(_walk(model, prefix=""))

    @property
    def framework(self) -> None:
        """NumPy arrays name no framework SafeTensors' ``format`` knows; the store's default
        stays."""
        return None

    @property
    def module_types(self) -> bool:
        """False: a dict names no modules (its container type is ``dict``), so adapters keyed
        on module types would change nothing."""
        return False

    def targets(self) -> list[Target]:
        """Every array, in dict order."""
        return [
            Target(path, _CONTAINER, from_numpy(parent[key].dtype), tuple(parent[key].shape))
            for path, (parent, key) in self._slots.items()
        ]

    def aliases(self) -> dict[str, str]:
        """Later keys holding the very same array object as an earlier key -> that key."""
        return aliases_by_identity(
            (path, parent[key])
            for path, (parent, key) in self._slots.items()
            if isinstance(parent[key], np.ndarray)  # scalars are values, never ties
        )

    def snapshots(self) -> list[TensorSnapshot]:
        """Snapshots viewing the arrays (no copy)."""
        return [
            TensorSnapshot.from_array(path, np.asarray(parent[key]), _CONTAINER)
            for path, (parent, key) in self._slots.items()
        ]

    def load(self, plan: LoadPlan) -> LoadOutcome:
        """Write each planned array; `plan.spare` is ignored (a dict has no hooks)."""
        outcome = LoadOutcome()
        for path, pending in plan.tensors.items():
            try:
                self._write(path, pending.read())
            except READ_ERRORS as err:
                outcome.errors[path] = str(err)
            else:
                outcome.loaded.add(path)
        return outcome

    def _write(self, path: str, array: np.ndarray[Any, Any]) -> None:
        parent, key = self._slots[path]
        existing = parent[key]
        if (
            isinstance(existing, np.ndarray)
            and existing.flags.writeable
            and existing.dtype == array.dtype
        ):
            np.copyto(existing, array)
        else:
            parent[key] = np.array(array)


def _walk(node: Any, prefix: str) -> Iterator[tuple[str, tuple[MutableMapping[str, Any], str]]]:
    for key, value in node.items():
        if not isinstance(key, str):
            raise InvalidOptionError(f"model dict keys must be strings, got {key!r}")
        path = f"{prefix}{key}"
        if isinstance(value, MutableMapping):
            yield from _walk(value, prefix=f"{path}.")
        elif isinstance(value, np.ndarray | np.generic):
            yield path, (node, key)
        else:
            raise InvalidOptionError(
                f"model entry {path!r} is {type(value).__name__}, not a NumPy array or dict"
            )
