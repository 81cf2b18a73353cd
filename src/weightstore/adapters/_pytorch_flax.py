"""PyTorch <-> Flax and Burn <-> Flax adapters: kernels laid out, parameters renamed.

    layer        PyTorch                  Burn                     Flax (NNX and Linen)
    Linear       weight [out, in]         weight [in, out]         kernel [in, out]
    Conv         weight [O, I, *k]        weight [O, I, *k]        kernel [*k, I, O]
    Embedding    weight [n, d]            weight [n, d]            embedding [n, d]
    LayerNorm    weight, bias             gamma, beta              scale, bias
    (GroupNorm, RMSNorm and InstanceNorm as LayerNorm)
    BatchNorm    weight, bias,            gamma, beta,             scale, bias (Param),
                 running_mean,            running_mean,            mean, var (BatchStat)
                 running_var,             running_var
                 num_batches_tracked      -                        -

Both sides' module types decide: torch's classes (by Burn's names, `burn_module_type`), NNX's
(``Linear``, ``Conv``, ``Embed``, ``BatchNorm``, ``LayerNorm``...) and Linen's as the JAX
bridge reads them (``Dense``, ``Conv``...). A snapshot is seen under its source's name on a
save and under the model's name on a load (the applier hands adapters the target's path), so
each adapter accepts both: a name of the side it converts from is renamed and laid out, a
name of the side it converts to is only laid out. Grouped convolutions convert (torch's
``[O, I/groups, *k]`` is Flax's ``[*k, I/groups, O]``); ConvTranspose does not, since torch's
transposed convolution flips its kernel where Flax's does not by default.

Linen keeps parameters and batch statistics in collections (``params.fc.kernel``,
``batch_stats.bn.mean``); adapters rename leaves, so collections are names for a key
remapping (docs/jax.md). torch's ``num_batches_tracked`` has no Flax counterpart: a load into
Flax reports it unused, a save for Flax filters it out (docs/adapters.md, as for Burn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Final

import numpy as np

from weightstore.adapters._base import Adapter
from weightstore.adapters._module_types import burn_module_type
from weightstore.base._record import Record
from weightstore.snapshot import TensorSnapshot

__all__ = [
    "LINEN_COLLECTIONS",
    "BurnToFlaxAdapter",
    "FlaxToBurnAdapter",
    "FlaxToPyTorchAdapter",
    "PyTorchToFlaxAdapter",
]

LINEN_COLLECTIONS: Final[dict[str, str]] = {
    "params": "Param",
    "batch_stats": "BatchStat",
    "cache": "Cache",
    "intermediates": "Intermediate",
}
"""Linen's collections and the NNX variable types holding the same things; the JAX bridge
types a Linen tree's leaves by them (``params.fc.kernel`` is a ``Param``)."""

_DENSE, _CONV, _EMBED, _NORM, _BATCH_NORM = "dense", "conv", "embed", "norm", "batch_norm"

# Module type (after `burn_module_type`) -> the kind of layer it is, on either side.
_KINDS: Final[dict[str, str]] = {
    "Linear": _DENSE, "Dense": _DENSE,
    "Conv1d": _CONV, "Conv2d": _CONV, "Conv3d": _CONV, "Conv": _CONV,
    "Embedding": _EMBED, "Embed": _EMBED,
    "LayerNorm": _NORM, "GroupNorm": _NORM, "RmsNorm": _NORM, "InstanceNorm": _NORM,
    "BatchNorm": _BATCH_NORM,
}  # fmt: skip


class _Side(Record):
    """The framework on the other side of Flax: how it lays out and names each layer."""

    name: str
    dense_transposed: bool  # Linear [out, in] (torch) or [in, out]
    norm_names: tuple[str, str]  # a norm's Flax ``scale``, ``bias`` on this side

    def names(self, kind: str) -> dict[str, str]:
        """Flax's leaf names of a `kind` layer -> this side's (equal names included)."""
        if kind in (_DENSE, _CONV):
            return {"kernel": "weight", "bias": "bias"}
        if kind == _EMBED:
            return {"embedding": "weight"}
        scale, bias = self.norm_names
        norm = {"scale": scale, "bias": bias}
        if kind == _BATCH_NORM:
            return {**norm, "mean": "running_mean", "var": "running_var"}
        return norm


PYTORCH: Final = _Side("PyTorch", dense_transposed=True, norm_names=("weight", "bias"))
BURN: Final = _Side("Burn", dense_transposed=False, norm_names=("gamma", "beta"))


def _to_flax_axes(ndim: int) -> tuple[int, ...]:
    """Conv ``[O, I, *k]`` -> ``[*k, I, O]``."""
    return (*range(2, ndim), 1, 0)


def _from_flax_axes(ndim: int) -> tuple[int, ...]:
    """Conv ``[*k, I, O]`` -> ``[O, I, *k]``."""
    return (ndim - 1, ndim - 2, *range(ndim - 2))


def _permuted(snapshot: TensorSnapshot, axes: tuple[int, ...]) -> TensorSnapshot:
    """`snapshot` with its axes reordered, lazily (contiguous when read)."""
    load = snapshot.load

    def permute() -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(load().transpose(axes))

    shape = tuple(snapshot.shape[axis] for axis in axes)
    return snapshot.replace(shape=shape, load=permute)


class _FlaxAdapter(Adapter):
    """The shared core of the four adapters: one side, one direction, tables for the rest."""

    side: ClassVar[_Side]
    to_flax: ClassVar[bool]  # converts the other side's layout into Flax's

    def adapt(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        """A leaf of a known layer renamed (when named as the source side names it) and laid
        out for the other side; anything else, or a snapshot of no known module, unchanged."""
        kind = _KINDS.get(burn_module_type(snapshot.module_type) or "")
        if kind is None or not snapshot.path:
            return snapshot
        last = snapshot.path[-1]
        flax_names = self.side.names(kind)
        other_names = {other: flax for flax, other in flax_names.items()}
        source, target = (other_names, flax_names) if self.to_flax else (flax_names, other_names)
        if last in source:  # named as the source names it (a save): rename and lay out
            renamed = source[last]
            flax_name = renamed if self.to_flax else last
            snapshot = _relaid(snapshot, kind, flax_name, self.side, self.to_flax)
            return snapshot.replace(path=(*snapshot.path[:-1], renamed))
        if last in target:  # already named as the target names it (a load): lay out only
            flax_name = last if self.to_flax else target[last]
            return _relaid(snapshot, kind, flax_name, self.side, self.to_flax)
        return snapshot

    def alternative_name(self, name: str, module_type: str | None) -> str | None:
        """The source side's name for the model's leaf `name` (a Flax ``kernel`` is torch's
        ``weight``), or None when it is the same or unknown."""
        kind = _KINDS.get(burn_module_type(module_type) or "")
        if kind is None:
            return None
        flax_names = self.side.names(kind)
        if self.to_flax:
            found = flax_names.get(name)
        else:
            found = {other: flax for flax, other in flax_names.items()}.get(name)
        return None if found == name else found

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _relaid(
    snapshot: TensorSnapshot, kind: str, flax_name: str, side: _Side, to_flax: bool
) -> TensorSnapshot:
    """A kernel's data in the target layout: dense transposed where the side's is
    ``[out, in]``, conv axes reordered; any other leaf as it is."""
    if flax_name != "kernel":
        return snapshot
    ndim = len(snapshot.shape)
    if kind == _DENSE and ndim == 2 and side.dense_transposed:
        return _permuted(snapshot, (1, 0))
    if kind == _CONV and ndim >= 3:
        axes: Callable[[int], tuple[int, ...]] = _to_flax_axes if to_flax else _from_flax_axes
        return _permuted(snapshot, axes(ndim))
    return snapshot


class PyTorchToFlaxAdapter(_FlaxAdapter):
    """torch's layout into Flax's: the from-adapter loading a torch file into a Flax model
    (``fc.kernel`` is read from ``fc.weight``, transposed), or the to-adapter saving a torch
    model for Flax."""

    side = PYTORCH
    to_flax = True


class FlaxToPyTorchAdapter(_FlaxAdapter):
    """Flax's layout into torch's: the from-adapter loading a Flax file into a torch model
    (``fc.weight`` is read from ``fc.kernel``, transposed), or the to-adapter saving a Flax
    model for torch."""

    side = PYTORCH
    to_flax = False


class BurnToFlaxAdapter(_FlaxAdapter):
    """Burn's layout into Flax's: Linear weights as they are (Burn's ``[in, out]`` is
    Flax's), conv kernels reordered, ``gamma``/``beta`` as ``scale``/``bias``; the
    from-adapter loading a Burn file into a Flax model."""

    side = BURN
    to_flax = True


class FlaxToBurnAdapter(_FlaxAdapter):
    """Flax's layout into Burn's: the to-adapter saving a Flax model for Burn."""

    side = BURN
    to_flax = False
