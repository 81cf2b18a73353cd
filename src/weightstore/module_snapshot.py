"""The four verbs on models: collect, apply, save into a store, load from a store.

`ModuleSnapshot` gives an `nn.Module` subclass the same four as methods (``model.save_into(
store)``), the Python form of Burn's extension trait. Plain functions work on any model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from weightstore.adapters import Adapter
from weightstore.apply_result import ApplyResult
from weightstore.paths import PathFilter
from weightstore.snapshot import TensorSnapshot
from weightstore.stores import Store
from weightstore.transfer import apply, collect

__all__ = ["ModuleSnapshot", "apply", "collect", "load_from", "save_into"]


def save_into(model: object, store: Store) -> None:
    """Save `model` into `store` (a file, or the store's memory).

    Args:
        model: a torch module or a nested dict of NumPy arrays.
        store: where to write; its filter, to-adapter and options decide what is written.
    """
    store.collect_from(model)


def load_from(model: object, store: Store, *, device: Any = None) -> ApplyResult:
    """Load `store` into `model` in place.

    Args:
        model: a torch module or a nested dict of NumPy arrays; its tensors are overwritten.
        store: what to read; its filter, remapping, from-adapter and options apply.
        device: where new torch tensors go; ``None`` keeps each parameter's device.

    Returns:
        The report of what was applied, skipped, missing, unused or failed.

    Raises:
        LoadFailedError: tensors are missing (without ``allow_partial``) or failed to load
            (with ``validate``, the default); the error carries the full `ApplyResult`.
    """
    return store.apply_to(model, device=device)


class ModuleSnapshot:
    """Mixin for `torch.nn.Module` subclasses: ``class Net(ModuleSnapshot, nn.Module)``."""

    def collect(
        self, filter: PathFilter | None = None, adapter: Adapter | None = None
    ) -> list[TensorSnapshot]:
        """This model's tensors as lazy snapshots (`weightstore.collect` on `self`)."""
        return collect(self, filter, adapter)

    def apply(
        self,
        snapshots: Sequence[TensorSnapshot] | Callable[[Any], None],
        filter: PathFilter | None = None,
        adapter: Adapter | None = None,
    ) -> Any:
        """Load snapshots into this model; given a function, torch's ``Module.apply(fn)``.

        torch's own ``apply`` (call `fn` on every submodule, used for weight init) keeps
        working: a callable argument is handed to it unchanged.
        """
        if callable(snapshots):
            return getattr(super(), "apply")(snapshots)  # noqa: B009  (torch's Module.apply)
        return apply(self, snapshots, filter, adapter)

    def save_into(self, store: Store) -> None:
        """Save this model into `store`; see the function `save_into`."""
        save_into(self, store)

    def load_from(self, store: Store, *, device: Any = None) -> ApplyResult:
        """Load `store` into this model in place; see the function `load_from`."""
        return load_from(self, store, device=device)
