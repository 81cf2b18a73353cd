"""Moving tensors between models and snapshots: `collect` for saves, `apply` for loads.

`collect` turns a model into lazy snapshots (filtered, then adapted). `apply` matches snapshots
to the model's tensors by name and writes them in, recording every outcome in an `ApplyResult`
instead of stopping at the first problem: applied, skipped by the filter, missing from the
source, unused by the model, and errors (shape, dtype, load). Matching and the shape and dtype
checks happen here; the bridge then loads the resulting `LoadPlan` through the model's own
machinery (torch's load hooks may rename, split or fill tensors), reading one tensor at a time
and only tensors that passed every check.

Given `LoadRules` (a store's or a record's strictness), `apply` judges the load before the
bridge writes anything, and refuses one that would break a rule for certain: names, shapes and
dtypes are all known then. What only the model's own load code can settle is given the benefit
of the doubt (`LoadReach`): a path a load hook or an overridden loader may fill is not
missing yet, a source tensor it may consume is not unused yet. Such a load runs, and its caller
judges the report afterwards; so do data that fails to read and torch's own errors, which show
only while the model loads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from weightstore.bridge import bridge_for, source_for
from weightstore.bridge._model import ReachingBridge
from weightstore.dtypes import DType, can_cast_exactly
from weightstore.errors import LayoutError, RemapCollisionError
from weightstore.report import ApplyError, ApplyResult
from weightstore.snapshot import StoredBlocks, TensorSnapshot, stored_blocks
from weightstore.transfer._groups import refuse_split_groups
from weightstore.transfer._plan import (
    LoadOutcome,
    LoadPlan,
    LoadReach,
    LoadRules,
    PendingTensor,
    Target,
)

if TYPE_CHECKING:
    # Only in annotations: a load imports this module first, and its time counts, so what a
    # plain load never uses (adapters, path rules, model-free sources) loads when used.
    import numpy as np

    from weightstore.adapters import Adapter
    from weightstore.paths import PathFilter

__all__ = ["DTypePolicy", "IndexMapper", "TieRule", "apply", "collect"]

IndexMapper = Callable[[Iterable[str]], dict[str, str]]
"""Renumbers list indices in names before matching (``map_indices_contiguous``): the names in,
a map from each name to its renumbered form out; applied to both sides of a load."""

TieRule = Callable[[Collection[str], Collection[str]], Mapping[str, str]]
"""Which model tensors to fill from another source tensor: given the source's names and the
model tensors it lacks, a map from such a model tensor to the source name to fill it from
(the store's ``with_tied_weights``, or a ``config.json``'s ``tie_word_embeddings``)."""

DTypePolicy = Literal["exact", "from_record", "cast"]
"""How a source dtype meets the model's: convert only when exact (stores), keep the source's
(Burn's ModuleRecord default), or cast whatever it costs (``cast_to_module_dtype``)."""


def collect(
    model: object,
    filter: PathFilter | None = None,
    adapter: Adapter | None = None,
    *,
    dedupe_tied: bool = False,
) -> list[TensorSnapshot]:
    """Lazy snapshots of a model's tensors, or of any other source's, in the source's order.

    Args:
        model: what to read: a `torch.nn.Module` or a (nested) dict of NumPy arrays, or a
            model-free source: a store, a container reader, a state dict (names -> torch
            tensors, NumPy arrays or `TensorSnapshot`s), an iterable of `TensorSnapshot`s
            (`bridge.source_for` lists them). Nothing is read here.
        filter: keep only tensors whose path (or container path) it matches; empty keeps all.
        adapter: applied to each kept snapshot (after filtering, on the source's names).
        dedupe_tied: keep only the first name of a tensor tied under several names (as
            safetensors' ``save_model`` does); by default every name is kept, as
            ``state_dict`` lists them.

    Raises:
        InvalidOptionError: `model` is no source; or `adapter` decides by module type (the
            PyTorch <-> Burn layout, half precision) and the source names no module types,
            so it would silently change nothing.
    """
    source = source_for(model)
    snapshots = source.snapshots()
    if dedupe_tied:
        aliases = source.aliases()
        snapshots = [s for s in snapshots if s.full_path not in aliases]
    if filter is not None and not filter.is_empty:
        every = snapshots
        snapshots = [s for s in snapshots if filter.matches(s.full_path, s.container_path)]
        if len(snapshots) != len(every) and any(s.group is not None for s in every):
            refuse_split_groups(every, snapshots)
    if adapter is not None:
        from weightstore.bridge import validate_adapter

        validate_adapter(adapter, source)
        snapshots = [adapter.adapt(s) for s in snapshots]
        snapshots = _saved_through_layouts(adapter, snapshots)
    return snapshots


def _saved_through_layouts(
    adapter: Adapter, snapshots: list[TensorSnapshot]
) -> list[TensorSnapshot]:
    """`snapshots` rewritten by the layouts in `adapter`, after its per-tensor steps; a save
    refuses before writing anything when a rule cannot make its group.

    Raises:
        LayoutError: the first problem, naming its rule, sources and targets.
    """
    from weightstore.adapters._layout_rewrite import rewrite_layouts

    rewritten, plan = rewrite_layouts(adapter, snapshots)
    if plan is not None and plan.problems:
        raise plan.problems[0]
    return rewritten


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
            from weightstore.paths import strip_enum_variants

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

    def find(self, path: str) -> tuple[str, TensorSnapshot] | None:
        """The key a model path is looked up under and the snapshot there, if any."""
        key = self.target_key.get(path, path)
        snapshot = self.by_key.get(key)
        return None if snapshot is None else (key, snapshot)

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
    rules: LoadRules | None = None,
    ties: TieRule | None = None,
    before_reads: Callable[[Sequence[TensorSnapshot]], None] | None = None,
) -> ApplyResult:
    """Load `snapshots` into `model` and report what happened; never raises for data problems.

    Snapshots are matched to the model's tensors by name and checked (shape, dtype) here; the
    model's own load machinery then runs (for torch: ``_load_from_state_dict`` and the load
    hooks), and may rename, split or fill tensors. Source tensors left unmatched are offered
    to it under their own names. The report follows what was written: a tensor a hook filled
    is applied, a source tensor a hook consumed is not unused, and torch's own error
    messages become load errors of the tensors they name.

    Args:
        model: a `torch.nn.Module` or a (nested) dict of NumPy arrays; changed in place.
        snapshots: the source tensors.
        filter: model paths it does not match are skipped and never written, hooks included
            (an empty filter skips nothing).
        adapter: transforms each matched snapshot, seen with the model's path and module types.
        device: torch only; where loaded tensors go (default: where the model's tensors are).
        map_indices: renumbers list indices on both sides before matching (contiguous mapping).
        skip_enum_variants: ignore Burn enum-variant segments in source paths.
        dtype_policy: ``"exact"`` converts to the model's dtype only without loss (else a
            dtype_mismatch error); ``"from_record"`` keeps the source dtype; ``"cast"`` converts
            whatever the loss.
        source_path: the file the snapshots come from, named in errors and in the report.
        rules: judge the load before writing: when it breaks one of `rules` whatever the
            model's own load code does, nothing is written and the report says so
            (`ApplyResult.refused`; the tensors that passed every check are `held_back`).
            Without rules, every tensor that passed the checks is written.
        ties: fills model tensors the source lacks from the source tensors it names (after
            the layouts, before matching); the report's ``tied`` lists those applied.
        before_reads: called once, before anything is read, with the snapshots the load will
            read (matched to a model tensor and past every check), so that a remote source can
            fetch exactly those in large batches; not called for a refused load.

    Returns:
        Every model path as applied, skipped, missing or an error (or held back), and the
        unused source paths. A path the model's own code filled although nothing at all came
        from the source (BatchNorm's counter) is reported missing, not applied.

    Raises:
        RemapCollisionError: two source tensors would fill one model tensor once enum variants
            are skipped; a load must never depend on which of them comes last.

    Example:
        >>> result = apply(model, list(store.get_all_snapshots().values()))  # doctest: +SKIP
        >>> result.is_success(), result.missing
    """
    bridge = bridge_for(model, device=device)
    targets = bridge.targets()
    aliases = bridge.aliases()  # before loading: the ties as the model was built
    problems: list[LayoutError] = []
    if adapter is not None:
        snapshots, problems = _through_layouts(adapter, snapshots, targets)
    tied: dict[str, str] = {}
    if ties is not None:
        snapshots, tied = _filled_ties(snapshots, targets, aliases, ties)
    index = _SourceIndex(snapshots, targets, map_indices, skip_enum_variants, source_path)
    matching = _match(targets, index, filter, adapter, dtype_policy)
    if problems:
        _block_layout_targets(matching, problems, targets)
    planned: tuple[LoadOutcome, ApplyResult] | None = None
    if rules is not None:
        reach = bridge.load_reach() if isinstance(bridge, ReachingBridge) else LoadReach()
        planned_outcome, planned_result, refused = _refusal(
            targets, aliases, index, matching, reach, rules
        )
        planned_result.layout_problems = [str(problem) for problem in problems]
        planned_result.tied = {p: s for p, s in tied.items() if p in planned_result.held_back}
        if refused:
            planned_result.source = source_path
            return planned_result
        planned = planned_outcome, planned_result
    if before_reads is not None:
        before_reads(matching.reads)
    outcome = bridge.load(matching.plan)
    if planned is not None and outcome == planned[0]:  # the usual load: as planned, so the
        result = planned[1]  # planned report is the real one (the same inputs give it)
    else:
        result = _report(targets, aliases, index, matching, outcome)
        result.layout_problems = [str(problem) for problem in problems]
    if tied:
        loaded = set(result.applied)
        result.tied = {path: source for path, source in tied.items() if path in loaded}
    result.source = source_path
    if matching.quantized:
        loaded = set(result.applied)
        result.quantized = {p: kind for p, kind in matching.quantized.items() if p in loaded}
    return result


def _through_layouts(
    adapter: Adapter, snapshots: Sequence[TensorSnapshot], targets: Sequence[Target]
) -> tuple[Sequence[TensorSnapshot], list[LayoutError]]:
    """`snapshots` rewritten by the layouts in `adapter` (its rules run before its per-tensor
    steps), planned against the model's shapes; and the problems the rules met."""
    from weightstore.adapters._layout_rewrite import rewrite_layouts

    shapes = {target.path: target.shape for target in targets}
    rewritten, plan = rewrite_layouts(adapter, snapshots, shapes)
    return rewritten, [] if plan is None else plan.problems


def _filled_ties(
    snapshots: Sequence[TensorSnapshot],
    targets: Sequence[Target],
    aliases: Mapping[str, str],
    ties: TieRule,
) -> tuple[Sequence[TensorSnapshot], dict[str, str]]:
    """`snapshots` and, for each model tensor they lack that `ties` fills from one they hold,
    that one under the model tensor's name; and those ties. A model tensor tied to another in
    the model itself is filled through the model's own tie, not here."""
    by_name = {s.full_path: s for s in snapshots}
    absent = [t.path for t in targets if t.path not in by_name and t.path not in aliases]
    if not absent:
        return snapshots, {}
    wanted = set(absent)
    tied = {
        path: source
        for path, source in ties(by_name.keys(), absent).items()
        if path in wanted and source in by_name
    }
    filled = [by_name[source].with_name(path) for path, source in tied.items()]
    return [*snapshots, *filled], tied


def _block_layout_targets(
    matching: _Matching, problems: Sequence[LayoutError], targets: Sequence[Target]
) -> None:
    """Make each model tensor a failed layout group was to fill a load error naming the rule
    (a rule that matched nothing leaves its targets missing, and says so in the report)."""
    paths = {target.path for target in targets}
    for problem in problems:
        if not problem.sources:
            continue
        for path in problem.targets:
            if path in paths and path not in matching.errors:
                matching.errors[path] = ApplyError.load_error(path, str(problem))
    blocked = frozenset(matching.skipped | matching.errors.keys())
    tensors = {p: t for p, t in matching.plan.tensors.items() if p not in blocked}
    matching.plan = LoadPlan(tensors, matching.plan.spare, blocked)


class _Matching:
    """What name matching and our own checks decided, before the model's code runs.

    A plain class: generating a dataclass costs ~0.4 ms at import, in a load's time."""

    __slots__ = ("errors", "plan", "quantized", "reads", "skipped", "used")

    def __init__(self) -> None:
        self.quantized: dict[str, str] = {}  # model path -> its source's quantized encoding
        self.plan = LoadPlan({})
        self.reads: list[TensorSnapshot] = []  # the source snapshots the plan reads
        self.used: set[str] = set()  # source names matched to a model path
        self.skipped: set[str] = set()  # model paths the filter excludes
        self.errors: dict[str, ApplyError] = {}  # model path -> check failed


def _match(
    targets: Sequence[Target],
    index: _SourceIndex,
    filter: PathFilter | None,
    adapter: Adapter | None,
    dtype_policy: DTypePolicy,
) -> _Matching:
    """Match each target to a source tensor and check it; build the plan for the bridge."""
    tensors: dict[str, PendingTensor] = {}
    matching = _Matching()
    for target in targets:
        found = _lookup(index, target, adapter)
        snapshot = None
        if found is not None:
            key, snapshot = found
            matching.used.add(index.name_of_key[key])  # the name, without joining its path
        if not _selected(filter, target):
            # Burn reports a filtered-out tensor the file lacks as missing; excluded is excluded.
            matching.skipped.add(target.path)
        elif snapshot is not None:
            prepared = _prepare(target, snapshot, adapter, dtype_policy)
            if isinstance(prepared, ApplyError):
                matching.errors[target.path] = prepared
            else:
                tensors[target.path] = prepared
                matching.reads.append(snapshot)
                if snapshot.stored is not None:
                    matching.quantized[target.path] = snapshot.stored.encoding
    paths = {target.path for target in targets}
    spare = {
        name: index.by_key[key].to_numpy
        for key, name in index.name_of_key.items()
        if name not in matching.used and name not in paths  # a model path means one thing
    }
    blocked = frozenset(matching.skipped | matching.errors.keys())
    matching.plan = LoadPlan(tensors, spare, blocked)
    return matching


def _refusal(
    targets: Sequence[Target],
    aliases: dict[str, str],
    index: _SourceIndex,
    matching: _Matching,
    reach: LoadReach,
    rules: LoadRules,
) -> tuple[LoadOutcome, ApplyResult, bool]:
    """The planned outcome, its report, and whether the load is refused before writing (the
    report then says so); `apply` reuses the report when the real load goes as planned.

    The plan is reported as if it loaded in full, with the model's known load code filling its
    defaults (BatchNorm's counter) and unknown code doing nothing; then judged with the benefit
    of the doubt for what unknown code may still do: a missing path it may fill counts as
    applied, a source tensor it may consume is not unused. Errors are certain: those paths are
    blocked.
    """
    known_fills = reach.defaults - matching.plan.blocked  # as the real load would report them
    planned_loads = LoadOutcome(set(matching.plan.tensors) | known_fills)
    planned = _report(targets, aliases, index, matching, planned_loads)
    doubtful = ApplyResult(
        applied=planned.applied + [p for p, _ in planned.missing if reach.may_supply(p)],
        skipped=planned.skipped,
        missing=[(p, c) for p, c in planned.missing if not reach.may_fill(p)],
        unused=[name for name in planned.unused if not reach.may_consume(name)],
        errors=planned.errors,
    )
    failure = rules.failure(doubtful)
    if failure is None:
        return planned_loads, planned, False
    planned.held_back, planned.applied, planned.refused = planned.applied, [], failure
    return planned_loads, planned, True


def _report(
    targets: Sequence[Target],
    aliases: dict[str, str],
    index: _SourceIndex,
    matching: _Matching,
    outcome: LoadOutcome,
) -> ApplyResult:
    """Sort every model path into one bucket, in model order, from matching and the load."""
    result = ApplyResult(applied=[], skipped=[], missing=[], unused=[], errors=[])
    applied: set[str] = set()
    # Whether any source data reached the model: if none did, what the model's code filled
    # with values of its own (BatchNorm's counter) is no load, and stays missing.
    from_source = bool(outcome.taken) or any(p in outcome.loaded for p in matching.plan.tensors)
    for target in targets:
        path = target.path
        if path in matching.skipped:
            result.skipped.append(path)
        elif path in matching.errors:
            result.errors.append(matching.errors[path])
        elif path in outcome.errors:
            result.errors.append(ApplyError.load_error(path, outcome.errors[path]))
        elif (path in outcome.loaded and from_source) or aliases.get(path) in applied:  # or tie
            result.applied.append(path)
            applied.add(path)
        else:
            result.missing.append((path, target.container_path))
    paths = {target.path for target in targets}
    result.errors.extend(  # failures outside any model path: a spare source, a module's hook
        ApplyError.load_error(path, message)
        for path, message in outcome.errors.items()
        if path not in paths
    )
    result.unused.extend(
        sorted(
            name
            for name in index.name_of_key.values()
            if name not in matching.used and name not in outcome.taken
        )
    )
    result.missing.sort()
    result.skipped.sort()
    return result


def _selected(filter: PathFilter | None, target: Target) -> bool:
    """Whether the load filter keeps `target` (no filter, or an empty one, keeps all)."""
    if filter is None or filter.is_empty:
        return True
    return filter.matches(target.path, target.container_path)


def _lookup(
    index: _SourceIndex, target: Target, adapter: Adapter | None
) -> tuple[str, TensorSnapshot] | None:
    """The source tensor for `target` and its index key: under its own name, else the
    adapter's alternative."""
    found = index.find(target.path)
    if found is None and adapter is not None:
        head, _, last = target.path.rpartition(".")
        alternative = adapter.alternative_name(last, target.module_type)
        if alternative is not None:
            found = index.find(f"{head}.{alternative}" if head else alternative)
    return found


def _prepare(
    target: Target,
    snapshot: TensorSnapshot,
    adapter: Adapter | None,
    dtype_policy: DTypePolicy,
) -> PendingTensor | ApplyError:
    """Adapt and check one matched snapshot without reading it: the tensor to load, or why not."""
    param_id = snapshot.param_id
    if adapter is not None:
        # Adapters see the model's name and module types, as the target expects them.
        seen = TensorSnapshot(
            tuple(target.path.split(".")), snapshot.dtype, snapshot.shape, snapshot.load,
            target.container, snapshot.param_id, snapshot.stored, snapshot.group,
        )  # fmt: skip
        snapshot = adapter.adapt_for_load(seen, target.dtype)
    if snapshot.shape != target.shape:
        return ApplyError.shape_mismatch(target.path, target.shape, snapshot.shape)
    # Table rows are shared objects, so `is` settles the usual case without the dataclass's
    # field-by-field comparison.
    same = snapshot.dtype is target.dtype or snapshot.dtype == target.dtype
    if not same and snapshot.group is not None and snapshot.group.role == "codes":
        # Codes are no values, whatever casts their dtype allows (F8 widens to BF16 exactly).
        return ApplyError.dtype_mismatch(
            target.path, target.dtype.name, snapshot.dtype.name, _decode_advice(snapshot, target)
        )
    stored = stored_blocks(snapshot)
    decodes = stored is not None and not same and target.dtype.kind == "f"
    if (
        dtype_policy == "exact"
        and not same
        and not decodes
        and not can_cast_exactly(snapshot.dtype, target.dtype)
    ):
        return ApplyError.dtype_mismatch(target.path, target.dtype.name, snapshot.dtype.name)
    if decodes and stored is not None:
        # Quantized blocks have no float dtype of their own: they decode to the model's.
        read = functools.partial(_decoded_as, snapshot, stored, target.dtype)
        return PendingTensor(read, target.dtype, param_id)
    if same or dtype_policy == "from_record":
        return PendingTensor(snapshot.to_numpy, snapshot.dtype, param_id)
    return PendingTensor(
        functools.partial(_read_as, snapshot, target.dtype), target.dtype, param_id
    )


def _decode_advice(snapshot: TensorSnapshot, target: Target) -> str:
    """What to do about quantized codes met by a float (or other) model tensor."""
    assert snapshot.group is not None
    group = snapshot.group.group
    wanted = {"BF16": "bf16", "F16": "f16"}.get(target.dtype.name, "f32")
    companions = ", ".join(sorted(group.companions.values())) or "its scheme"
    return (
        f"it holds the codes of a {group.layout} quantized tensor (with {companions}), not "
        f"values: load with .with_dequantize({wanted!r}) (convert: --dequantize {wanted}) to "
        "decode it"
    )


def _decoded_as(
    snapshot: TensorSnapshot, stored: StoredBlocks, dtype: DType
) -> np.ndarray[Any, Any]:
    """A quantized snapshot's values decoded straight to `dtype`, with `to_numpy`'s checks."""
    return snapshot.replace(load=functools.partial(stored.read_as, dtype)).to_numpy()


def _read_as(snapshot: TensorSnapshot, dtype: DType) -> np.ndarray[Any, Any]:
    """The snapshot's data converted to `dtype` (the check that this is allowed came first)."""
    return snapshot.to_numpy().astype(dtype.numpy)
