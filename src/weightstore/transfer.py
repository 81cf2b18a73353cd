"""Moving tensors between models and snapshots: `collect` for saves, `apply` for loads.

`collect` turns a model into lazy snapshots (filtered, then adapted). `apply` matches snapshots
to the model's tensors by name and writes them in, recording every outcome in an `ApplyResult`
instead of stopping at the first problem: applied, skipped by the filter, missing from the
source, unused by the model, and errors (shape, dtype, load). Data is read one tensor at a time,
only for tensors that pass every check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from weightstore.adapters import Adapter
from weightstore.apply_result import ApplyError, ApplyResult
from weightstore.bridge import Target, bridge_for
from weightstore.dtypes import can_cast_exactly
from weightstore.errors import RemapCollisionError, WeightstoreError
from weightstore.paths import PathFilter, strip_enum_variants
from weightstore.snapshot import TensorSnapshot

__all__ = ["apply", "collect"]

IndexMapper = Callable[[Iterable[str]], dict[str, str]]

# How a source dtype meets the model's: convert only when exact (stores), keep the source's
# (Burn's ModuleRecord default), or cast whatever it costs (``cast_to_module_dtype``).
DTypePolicy = Literal["exact", "from_record", "cast"]

def collect(
    model: object,
    filter: PathFilter | None = None,
    adapter: Adapter | None = None,
    *,
    dedupe_tied: bool = False,
) -> list[TensorSnapshot]:
    """Lazy snapshots of a model's tensors, in the model's order.

    Args:
        model: a `torch.nn.Module` or a (nested) dict of NumPy arrays.
        filter: keep only tensors whose path (or container path) it matches; empty keeps all.
        adapter: applied to each kept snapshot (after filtering, on the model's names).
        dedupe_tied: keep only the first name of a tensor tied under several names (as
            safetensors' ``save_model`` does); by default every name is kept, as
            ``state_dict`` lists them.
    """
    bridge = bridge_for(model)
    snapshots = bridge.snapshots()
    if dedupe_tied and hasattr(bridge, "aliases"):
        aliases = bridge.aliases()
        snapshots = [s for s in snapshots if s.full_path not in aliases]
    if filter is not None and not filter.is_empty:
        snapshots = [s for s in snapshots if filter.matches(s.full_path, s.container_path)]
    if adapter is not None:
        snapshots = [adapter.adapt(s) for s in snapshots]
    return snapshots


class _SourceIndex:
    """Snapshots by the key a model path is looked up under (after index and enum mapping)."""

    def __init__(
        self,
        snapshots: Sequence[TensorSnapshot],
        targets: Sequence[Target],
        map_indices: IndexMapper | None,
        skip_enum_variants: bool,
        path: str | None = None,
    ) -> None:
        names = {s.full_path: s for s in snapshots}  # duplicates: the last one wins, as in Burn
        source_key = {name: name for name in names}
        if skip_enum_variants:
            source_key = {name: strip_enum_variants(name) for name in names}
        self.target_key = {t.path: t.path for t in targets}
        if map_indices is not None:
            source_canonical = map_indices(source_key.values())
            source_key = {name: source_canonical.get(k, k) for name, k in source_key.items()}
            self.target_key = map_indices(t.path for t in targets)
        self.by_key: dict[str, TensorSnapshot] = {}
        self.name_of_key: dict[str, str] = {}
        for name, snapshot in names.items():
            key = source_key[name]
            if key in self.name_of_key:  # two file tensors would fill one model tensor
                raise RemapCollisionError(
                    key, self.name_of_key[key], name, path=path, cause="skipping enum variants"
                )
            self.by_key[key] = snapshot
            self.name_of_key[key] = name

    def find(self, path: str) -> TensorSnapshot | None:
        return self.by_key.get(self.target_key.get(path, path))

    def key_of(self, path: str) -> str:
        return self.target_key.get(path, path)


def apply(
    model: object,
    snapshots: Sequence[TensorSnapshot],
    filter: PathFilter | None = None,
    adapter: Adapter | None = None,
    *,
    device: Any = None,
    map_indices: IndexMapper | None = None,
    skip_enum_variants: bool = False,
    dtype_policy: DTypePolicy = "exact",
    source_path: str | None = None,
) -> ApplyResult:
    """Load `snapshots` into `model` and report what happened; never raises for data problems.

    Args:
        model: a `torch.nn.Module` or a (nested) dict of NumPy arrays; changed in place.
        snapshots: the source tensors.
        filter: model paths it does not match are skipped (an empty filter skips nothing).
        adapter: transforms each matched snapshot, seen with the model's path and module types.
        device: torch only; where loaded tensors go (default: where the model's tensors are).
        map_indices: renumbers list indices on both sides before matching (contiguous mapping).
        skip_enum_variants: ignore Burn enum-variant segments in source paths.
        dtype_policy: ``"exact"`` converts to the model's dtype only without loss (else a
            dtype_mismatch error); ``"from_record"`` keeps the source dtype; ``"cast"`` converts
            whatever the loss.
        source_path: the file the snapshots come from, named in errors.

    Raises:
        RemapCollisionError: two source tensors would fill one model tensor once enum variants
            are skipped; a load must never depend on which of them comes last.
    """
    bridge = bridge_for(model, device=device)
    targets = bridge.targets()
    index = _SourceIndex(snapshots, targets, map_indices, skip_enum_variants, source_path)
    aliases: dict[str, str] = bridge.aliases() if hasattr(bridge, "aliases") else {}
    result = ApplyResult(applied=[], skipped=[], missing=[], unused=[], errors=[])
    used: set[str] = set()
    for target in targets:
        snapshot = _lookup(index, target, adapter)
        if snapshot is not None:
            used.add(snapshot.full_path)
        if not _selected(filter, target):
            # Burn reports a filtered-out tensor the file lacks as missing; excluded is excluded.
            result.skipped.append(target.path)
            continue
        if snapshot is None:
            if aliases.get(target.path) in result.applied:
                result.applied.append(target.path)  # filled through its tie
            else:
                result.missing.append((target.path, target.container_path))
            continue
        error = _apply_one(bridge, target, snapshot, adapter, dtype_policy)
        if error is None:
            result.applied.append(target.path)
        else:
            result.errors.append(error)
    result.unused.extend(sorted(name for name in index.name_of_key.values() if name not in used))
    result.missing.sort()
    result.skipped.sort()
    return result


def _selected(filter: PathFilter | None, target: Target) -> bool:
    if filter is None or filter.is_empty:
        return True
    return filter.matches(target.path, target.container_path)


def _lookup(index: _SourceIndex, target: Target, adapter: Adapter | None) -> TensorSnapshot | None:
    snapshot = index.find(target.path)
    if snapshot is None and adapter is not None:
        head, _, last = target.path.rpartition(".")
        alternative = adapter.alternative_name(last, target.module_type)
        if alternative is not None:
            snapshot = index.find(f"{head}.{alternative}" if head else alternative)
    return snapshot


def _apply_one(
    bridge: Any,
    target: Target,
    snapshot: TensorSnapshot,
    adapter: Adapter | None,
    dtype_policy: DTypePolicy,
) -> ApplyError | None:
    param_id = snapshot.param_id
    if adapter is not None:
        # Adapters see the model's name and module types, as the target expects them.
        seen = TensorSnapshot(
            tuple(target.path.split(".")), snapshot.dtype, snapshot.shape, snapshot.load,
            target.container, snapshot.param_id,
        )  # fmt: skip
        snapshot = adapter.adapt(seen)
    if snapshot.shape != target.shape:
        return ApplyError.shape_mismatch(target.path, target.shape, snapshot.shape)
    if dtype_policy == "exact" and not can_cast_exactly(snapshot.dtype, target.dtype):
        return ApplyError.dtype_mismatch(target.path, target.dtype.name, snapshot.dtype.name)
    try:
        array = snapshot.to_numpy()
        if snapshot.dtype != target.dtype and dtype_policy != "from_record":
            array = array.astype(target.dtype.numpy)
        bridge.assign(target, array, param_id)
    except (WeightstoreError, ValueError, RuntimeError, TypeError) as err:
        return ApplyError.load_error(target.path, str(err))
    return None
