"""Which module owns each tensor of a file, so that `convert`'s adapters can act on it.

Adapters decide by the type of the module owning a tensor (`TensorSnapshot.container`): a
Linear weight is transposed for Burn, a norm's ``weight`` becomes ``gamma``, BatchNorm stays out
of half precision. A model knows its modules; a file holds only names and shapes. So `convert`
infers the owner from the tensors one module holds (those sharing a name prefix, `infer_owners`):

    running_mean or running_var among them        BatchNorm
    gamma (Burn's name for a norm's scale)         LayerNorm (a norm: no adapter asks which)
    weight of rank 3, 4 or 5                       Conv1d, Conv2d, Conv3d (ConvTranspose alike)
    weight of rank 2, bias of its output size      Linear (torch: [out, in]; Burn: [in, out]);
                                                   a bias fitting only the other layout is an
                                                   error (the file is laid out the other way)
    weight of rank 1, bias of the same shape       LayerNorm
    weight of rank 2 alone                         Linear or Embedding: ambiguous
    weight of rank 1 alone                         RmsNorm or PRelu: ambiguous
    anything else, or other tensors beside them    no type: every adapter leaves it as it is

An ambiguous owner does not matter when the adapters asked for treat every candidate alike (half
precision casts Linear and Embedding weights the same way): `assign_owners` adapts a small
probe tensor as each candidate and compares. When it matters, `convert` stops and asks for
``--module-type PATTERN=TYPE``, which also overrides any inference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from weightstore.adapters import Adapter
from weightstore.errors import InvalidOptionError
from weightstore.paths import PathFilter
from weightstore.snapshot import TensorSnapshot

__all__ = ["Layout", "Owner", "TypeRule", "assign_owners", "infer_owners"]

Layout = Literal["torch", "burn"]
"""Whose names and shapes a file follows; ``None`` where either may."""

_CONV_BY_RANK: Final = {3: "Conv1d", 4: "Conv2d", 5: "Conv3d"}
_BATCH_NORM_LEAVES: Final = frozenset(
    {"weight", "bias", "gamma", "beta", "running_mean", "running_var", "num_batches_tracked"}
)
_BURN_NORM_LEAVES: Final = frozenset({"gamma", "beta"})
_PLAIN_LEAVES: Final = frozenset({"weight", "bias"})
_SHOWN: Final = 3  # ambiguous tensors named in the error


@dataclass(frozen=True, slots=True)
class Owner:
    """What a tensor's names and shapes say about the module owning it.

    Attributes:
        candidates: the module types it may be: one when known, several when ambiguous, none
            when no rule applies.
        why: what the rule saw, for the error (``"a 2-D weight with no bias"``).
        misfit: set when the tensors fit the other framework's layout only: what was seen.
    """

    candidates: tuple[str, ...]
    why: str = ""
    misfit: str | None = None


@dataclass(frozen=True, slots=True)
class TypeRule:
    """``--module-type PATTERN=TYPE``: tensors whose name matches are owned by `module_type`."""

    pattern: PathFilter
    module_type: str


def infer_owners(shapes: Mapping[str, tuple[int, ...]], layout: Layout | None) -> dict[str, Owner]:
    """The owner of every tensor in `shapes` (name -> shape), by the rules of the module doc."""
    groups: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, shape in shapes.items():
        prefix, _, leaf = name.rpartition(".")
        groups.setdefault(prefix, {})[leaf] = shape
    owners: dict[str, Owner] = {}
    for prefix, leaves in groups.items():
        owner = _group_owner(leaves, layout)
        for leaf in leaves:
            owners[f"{prefix}.{leaf}" if prefix else leaf] = owner
    return owners


def _group_owner(leaves: Mapping[str, tuple[int, ...]], layout: Layout | None) -> Owner:
    names = set(leaves)
    if names & {"running_mean", "running_var"} and names <= _BATCH_NORM_LEAVES:
        return Owner(("BatchNorm",))
    if "gamma" in names and names <= _BURN_NORM_LEAVES:
        return Owner(("LayerNorm",))
    weight = leaves.get("weight")
    if weight is None or not names <= _PLAIN_LEAVES:
        return Owner(())
    bias = leaves.get("bias")
    if len(weight) in _CONV_BY_RANK:
        return Owner((_CONV_BY_RANK[len(weight)],))
    if len(weight) == 2:
        if bias is None:
            return Owner(("Linear", "Embedding"), "a 2-D weight with no bias")
        if _linear_bias(weight, bias, layout):
            return Owner(("Linear",))
        if _linear_bias(weight, bias, None):  # fits the other layout only
            return Owner((), misfit=f"weight {list(weight)} with bias {list(bias)}")
        return Owner(())
    if len(weight) == 1:
        if bias is None:
            return Owner(("RmsNorm", "PRelu"), "a 1-D weight with no bias")
        return Owner(("LayerNorm",)) if bias == weight else Owner(())
    return Owner(())


def _linear_bias(weight: tuple[int, ...], bias: tuple[int, ...], layout: Layout | None) -> bool:
    """Whether `bias` has the output size of a Linear `weight` laid out as `layout` says."""
    outputs = {"torch": {weight[0]}, "burn": {weight[1]}, None: set(weight)}[layout]
    return len(bias) == 1 and bias[0] in outputs


def assign_owners(
    snapshots: Sequence[TensorSnapshot],
    owners: Mapping[str, Owner],
    rules: Sequence[TypeRule],
    adapter: Adapter,
    flags: str,
) -> list[TensorSnapshot]:
    """`snapshots` with their owner as container type: a rule's type (the last that matches),
    else the inferred one; an ambiguous owner takes its first candidate when `adapter` treats
    all candidates alike.

    Raises:
        InvalidOptionError: an ambiguous owner that `adapter` (asked for by `flags`) treats
            differently per candidate, or a Linear laid out as the other framework lays it
            out; in either case unless a rule names the type.
    """
    assigned, unclear, misfits = [], [], []
    for snapshot in snapshots:
        name = snapshot.full_path
        chosen = [rule.module_type for rule in rules if rule.pattern.matches(name)]
        owner = owners.get(name, Owner(()))
        candidates = (chosen[-1],) if chosen else owner.candidates
        if len(candidates) > 1 and not _alike(snapshot, candidates, adapter):
            unclear.append((name, owner))
        if owner.misfit is not None and not chosen:
            misfits.append((name, owner))
        assigned.append(snapshot.replace(container=candidates[:1]))
    if misfits:
        raise InvalidOptionError(_misfit_message(misfits, flags), option="module_type")
    if unclear:
        raise InvalidOptionError(_unclear_message(unclear, flags), option="module_type")
    return assigned


def _alike(snapshot: TensorSnapshot, candidates: tuple[str, ...], adapter: Adapter) -> bool:
    """Whether `adapter` gives the same name, dtype, shape and values for a small probe of
    `snapshot`'s rank and dtype, whichever candidate owns it."""
    numpy_dtype = snapshot.dtype.numpy
    if numpy_dtype is None:
        return False  # no probe can be built; ask rather than guess
    shape = tuple(range(2, 2 + len(snapshot.shape)))  # distinct sizes show a transpose
    values = np.arange(math.prod(shape)).reshape(shape).astype(numpy_dtype)
    seen = set()
    for candidate in candidates:
        probe = TensorSnapshot(snapshot.path, snapshot.dtype, shape, lambda: values, (candidate,))
        out = adapter.adapt(probe)
        seen.add((out.full_path, out.dtype.name, out.shape, out.to_numpy().tobytes()))
    return len(seen) == 1


def _more(found: list[tuple[str, Owner]]) -> str:
    """`` (2 more: 'a', 'b')`` for the entries after the first, or nothing."""
    more = len(found) - 1
    if not more:
        return ""
    others = ", ".join(repr(name) for name, _ in found[1 : 1 + _SHOWN])
    return f" ({more:,} more: {others}{', ...' if more > _SHOWN else ''})"


def _unclear_message(unclear: list[tuple[str, Owner]], flags: str) -> str:
    name, owner = unclear[0]
    types = " or ".join(owner.candidates)
    return (
        f"cannot tell which module owns {name!r} ({owner.why}: {types}), and {flags} treats "
        f"them differently; name it with --module-type 'PATTERN=TYPE'{_more(unclear)}"
    )


def _misfit_message(misfits: list[tuple[str, Owner]], flags: str) -> str:
    name, owner = misfits[0]
    return (
        f"{name!r} ({owner.misfit}) is a Linear laid out the other way than {flags} expects; "
        f"is the file already converted? (--module-type names the type to override){_more(misfits)}"
    )
