"""Adapters: snapshot-to-snapshot transforms keyed on the owning module's type.

An adapter returns a new snapshot whose loader wraps the old one, so nothing is read until the
data is asked for. Adapters chain: ``a.chain(b)`` runs `a` then `b`. On load, the applier calls
`Adapter.adapt_for_load`, which also knows the model tensor's dtype (an adapter may convert to
it; by default it is `adapt`), and asks for an alternative name when a model tensor is not found
under its own (a torch ``weight`` of a norm layer is Burn's ``gamma``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from weightstore.dtypes import DType
from weightstore.snapshot import TensorSnapshot

__all__ = ["Adapter", "ChainAdapter", "IdentityAdapter"]


class Adapter(ABC):
    """Base of every adapter: `adapt` one snapshot, optionally name an alternative."""

    @abstractmethod
    def adapt(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        """The snapshot as the other side expects it; lazy in its data."""

    def adapt_for_load(self, snapshot: TensorSnapshot, model_dtype: DType) -> TensorSnapshot:
        """The snapshot as a load into a model tensor of `model_dtype` needs it (the snapshot
        already carries the model's path and module types). By default `adapt`; an adapter
        whose output depends on the model (a precision adapter) overrides it."""
        return self.adapt(snapshot)

    def alternative_name(self, name: str, module_type: str | None) -> str | None:
        """Another name the source may use for the tensor `name` of a `module_type` module."""
        return None

    def chain(self, then: Adapter) -> ChainAdapter:
        """An adapter that applies this one, then `then`."""
        return ChainAdapter(self, then)


class IdentityAdapter(Adapter):
    """Leaves every snapshot as it is (the default of every store)."""

    def adapt(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        """`snapshot` itself, not a copy."""
        return snapshot

    def __repr__(self) -> str:
        return "IdentityAdapter()"


class ChainAdapter(Adapter):
    """`first`, then `second`; alternative names are looked up through both, as in Burn.

    Attributes:
        first: the adapter that runs first.
        second: the adapter that runs on `first`'s output.
    """

    def __init__(self, first: Adapter, second: Adapter) -> None:
        self.first, self.second = first, second

    def adapt(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        """`second`'s adaptation of `first`'s."""
        return self.second.adapt(self.first.adapt(snapshot))

    def adapt_for_load(self, snapshot: TensorSnapshot, model_dtype: DType) -> TensorSnapshot:
        """`second`'s load adaptation of `first`'s, both told the model's dtype."""
        first = self.first.adapt_for_load(snapshot, model_dtype)
        return self.second.adapt_for_load(first, model_dtype)

    def alternative_name(self, name: str, module_type: str | None) -> str | None:
        """`first`'s alternative, renamed again by `second` if it has one for it; else
        `second`'s alternative for `name`."""
        via_first = self.first.alternative_name(name, module_type)
        if via_first is None:
            return self.second.alternative_name(name, module_type)
        return self.second.alternative_name(via_first, module_type) or via_first

    def __repr__(self) -> str:
        return f"{self.first!r}.chain({self.second!r})"
