"""The four verbs on models: collect, apply, save into a store, load from a store.

A save also reads sources that are no model (another store, a reader, a state dict,
snapshots), so converting a file is ``save_into(source_store, destination_store)``.

`ModuleSnapshot` gives an `nn.Module` subclass the same four as methods (``model.save_into(
store)``), the Python form of Burn's extension trait. Plain functions work on any model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from weightstore.base._lazy import lazy_exports

if TYPE_CHECKING:  # at run time these load with the first call, not with this module
    from weightstore.adapters import Adapter
    from weightstore.paths import PathFilter
    from weightstore.report import ApplyResult
    from weightstore.snapshot import TensorSnapshot
    from weightstore.stores import Store
    from weightstore.transfer._apply import apply as apply
    from weightstore.transfer._apply import collect as collect

# `apply` and `collect` are `weightstore.transfer`'s own functions, imported on first use so
# that ``from weightstore import load_from`` loads no model-walking machinery.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("apply", "collect"), "weightstore.transfer._apply"),
        **dict.fromkeys(("ModuleSnapshot", "load_from", "save_into"), __name__),
    },
)


def save_into(model: object, store: Store) -> str | None:
    """Save `model`, or tensors from any other source, into `store` (a file, or its memory).

    Besides models, a save reads another store (converting a file), a container reader, a
    state dict (names -> torch tensors, NumPy arrays or `TensorSnapshot`s) or an iterable of
    `TensorSnapshot`s; each tensor is read when the writer gets to it and dropped before the
    next, so a file larger than memory converts. The destination's filter, key remapping,
    to-adapter and metadata apply to every source alike.

    Args:
        model: a torch module or a nested dict of NumPy arrays, or one of the sources above.
        store: where to write; its filter, to-adapter and options decide what is written.

    Returns:
        The path written (``model`` -> ``model.bpk`` under burnpack's extension rule), or
        None for a memory store (``store.get_bytes()`` has the file).

    Raises:
        InvalidOptionError: `model` is no source; or the store's to-adapter decides by module
            type (`PyTorchToBurnAdapter`, `HalfPrecisionAdapter`) and `model` is a dict of
            NumPy arrays, which names no modules.
        ModuleTypeNeededError: the to-adapter decides by module type and a model-free
            source's names and shapes do not settle one it would act on (a 2-D weight alone:
            Linear or Embedding); `weightstore.adapters.assign_module_types` names them. A
            file's other tensors are typed from their names and shapes, as ``weightstore
            convert`` types them.
        DestinationExistsError: the file exists and the store's `overwrite` is off.

    Example:
        >>> save_into(SafetensorsStore.from_file("model.safetensors"),  # doctest: +SKIP
        ...           BurnpackStore.from_file("model").with_to_adapter(FloatCastAdapter.to("F16")))
        'model.bpk'
    """
    return store.collect_from(model)


def load_from(model: object, store: Store, *, device: Any = None) -> ApplyResult:
    """Load `store` into `model` in place.

    Args:
        model: a torch module or a nested dict of NumPy arrays; its tensors are overwritten.
        store: what to read; its filter, remapping, from-adapter and options apply.
        device: where new torch tensors go; ``None`` keeps each parameter's device.

    Returns:
        The report of what was applied, skipped, missing, unused or failed.

    Raises:
        LoadFailedError: tensors are missing (without ``allow_partial``), failed their checks
            (with ``validate``, the default), or none would load at all; the model is left
            untouched when the checks made before writing find it, and the error carries the
            full `ApplyResult`.
    """
    return store.apply_to(model, device=device)


class ModuleSnapshot:
    """Mixin for `torch.nn.Module` subclasses: ``class Net(ModuleSnapshot, nn.Module)``."""

    def collect(
        self, filter: PathFilter | None = None, adapter: Adapter | None = None
    ) -> list[TensorSnapshot]:
        """This model's tensors as lazy snapshots (`weightstore.collect` on `self`)."""
        from weightstore.transfer._apply import collect

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
        from weightstore.transfer._apply import apply

        return apply(self, snapshots, filter, adapter)

    def save_into(self, store: Store) -> str | None:
        """Save this model into `store`: the path written, or None for a memory store; see the
        function `save_into`."""
        return save_into(self, store)

    def load_from(self, store: Store, *, device: Any = None) -> ApplyResult:
        """Load `store` into this model in place; see the function `load_from`."""
        return load_from(self, store, device=device)
