"""A store's load pipeline: snapshots into a model, judged by the store's rules, and the
failure raised with the fix that names the store's builders.

The store hands this module its options, its path and callables over its own reader, never
itself, so the pipeline sits below the store class (`_base`) and imports nothing of it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from weightstore.base._gc import collector_paused
from weightstore.container._format import ContainerFormat
from weightstore.errors import InvalidOptionError, LoadFailedError, WeightstoreError
from weightstore.io import is_url
from weightstore.stores._groups import source_snapshots
from weightstore.stores._load_failure import store_fix
from weightstore.stores._options import StoreOptions
from weightstore.stores._remote_plan import announce_reads
from weightstore.stores._sets import may_be_grouped, restricted_for_load
from weightstore.stores._ties import ties_for_load

if TYPE_CHECKING:
    from weightstore.adapters import Adapter, LayoutPlan
    from weightstore.report import ApplyResult
    from weightstore.snapshot import TensorSnapshot
    from weightstore.transfer._apply import IndexMapper

__all__ = [
    "apply_snapshots",
    "checked_top_level_key",
    "plan_load",
    "restricted_load_snapshots",
    "verify_before_load",
]


def verify_before_load(reader: Any) -> None:
    """Check every digest `reader`'s file carries before a load writes anything, so a
    mismatch leaves the model unchanged (docs/integrity.md); the load's own reads then skip
    the tensors checked here. Nothing for a reader without digests or with checking off.

    Raises:
        DigestMismatchError: the first tensor whose bytes differ.
    """
    check = getattr(reader, "digest_check", None)
    if check is not None and check() is None:  # a file without digests: no pass at all
        return
    verify = getattr(reader, "verify_digests", None)
    if verify is not None:
        verify()


def checked_top_level_key(
    result: ApplyResult,
    fmt: ContainerFormat,
    options: StoreOptions,
    opens_under: Callable[[str], bool],
) -> str | None:
    """The top-level key `result`'s prefix change points at, if the store can read a
    checkpoint under one and the file opens under that key (``opens_under(key)``); else
    None."""
    change = result.prefix_change()
    key = None if change is None else change.top_level_key
    options_ok = "top_level_key" in fmt.store_options
    if key is None or not options_ok or options.top_level_key is not None:
        return None
    try:
        return key if opens_under(key) else None
    except WeightstoreError:  # not a key of the top-level dict: the remapping is the fix
        return None


def plan_load(
    model: object, snapshots: Sequence[TensorSnapshot], adapter: Adapter | None
) -> LayoutPlan:
    """`Store.plan`: what the layouts in `adapter` make of `snapshots` for `model`, planned
    against the model's shapes as a load plans them; no data read.

    Raises:
        InvalidOptionError: `adapter` holds no layout.
    """
    from weightstore.adapters._layout_rewrite import rewrite_layouts
    from weightstore.bridge import bridge_for

    shapes = {target.path: target.shape for target in bridge_for(model).targets()}
    _, plan = rewrite_layouts(adapter, snapshots, shapes)
    if plan is None:
        raise InvalidOptionError(
            "plan needs a layout: pass one, or give the store .with_from_adapter(layout)"
        )
    return plan


def apply_snapshots(
    model: object,
    snapshots: Sequence[TensorSnapshot],
    device: Any,
    *,
    fmt: ContainerFormat,
    options: StoreOptions,
    path: str | None,
    map_indices: IndexMapper | None,
    opens_under: Callable[[str], bool],
    unused: Sequence[str] = (),
    file_names: Mapping[str, str] | None = None,
    io: str | None = None,
    before_reads: Callable[[Sequence[TensorSnapshot]], None] | None = None,
) -> ApplyResult:
    """Load `snapshots` into `model` with the store's `options`; `path` is the source file
    (None for memory). `unused` names source tensors left out before the load, reported as
    unused. `file_names` maps a snapshot name the list renumbering changed back to the name
    before it: the report lists unused tensors under those, the names the file holds, and
    its hints (a changed prefix) are found on them, since renumbering one side of a
    ``module.`` prefix (``module.2`` -> ``module.1``) hides what the other side's names are.

    Raises:
        LoadFailedError: as `Store.apply_to` says.
    """
    from weightstore.transfer._apply import apply
    from weightstore.transfer._plan import LoadRules

    grouped = [s for s in snapshots if s.group is not None]
    path_filter = options.active_filter()
    if grouped and path_filter is not None:
        from weightstore.transfer._groups import refuse_split_groups

        refuse_split_groups(grouped, path_filter=path_filter)
    # A URL fetches what the load will read, once matching has settled it, in large batches.
    announce: Callable[[Sequence[TensorSnapshot]], None] | None = (
        announce_reads if path is not None and is_url(path) else None
    )
    if before_reads is not None:
        announce = _both(before_reads, announce)
    rules = LoadRules(validate=options.validate, allow_partial=options.allow_partial)
    with collector_paused():  # no garbage to find, and a full pass over torch's objects costs
        result = apply(
            model,
            snapshots,
            options.active_filter(),
            options.from_adapter,
            device=device,
            map_indices=map_indices,
            skip_enum_variants=options.skip_enum_variants,
            source_path=path,
            rules=rules,
            ties=functools.partial(ties_for_load, options.tied_weights, path),
            before_reads=announce,
        )
        if file_names:
            result.unused = [file_names.get(name, name) for name in result.unused]
        if unused or file_names:
            result.unused = sorted([*result.unused, *unused])
        result.top_level_key = checked_top_level_key(result, fmt, options, opens_under)
        result.io = io
    failure = result.refused or rules.failure(result)
    if failure is None:
        return result
    fix = store_fix(result, failure)
    if grouped:
        fix = _dequantize_fix(result, grouped) or fix
    raise LoadFailedError(result, failure, fix, path=path)


def _both(
    first: Callable[[Sequence[TensorSnapshot]], None],
    then: Callable[[Sequence[TensorSnapshot]], None] | None,
) -> Callable[[Sequence[TensorSnapshot]], None]:
    """One `before_reads` hook that runs `first` (a caller's), then `then` (the store's)."""

    def run(reads: Sequence[TensorSnapshot]) -> None:
        first(reads)
        if then is not None:
            then(reads)

    return run


def _dequantize_fix(result: ApplyResult, grouped: Sequence[TensorSnapshot]) -> str | None:
    """The fix when the failure comes from quantized groups read as their parts: codes met
    by a float tensor, or a model tensor missing under a group's logical name (gpt-oss's
    ``X`` stored as ``X_blocks`` and ``X_scales``)."""
    logical: dict[str, str] = {}
    for snapshot in grouped:
        assert snapshot.group is not None
        group = snapshot.group.group
        if snapshot.group.role != "codes":
            continue
        suffix = group.codes[len(group.name) :] if group.codes.startswith(group.name) else ""
        name = snapshot.full_path
        logical[name[: len(name) - len(suffix)] if suffix else name] = group.layout
    hit = [logical[e.path] for e in result.errors if e.path in logical]
    hit += [logical[p] for p, _ in result.missing if p in logical]
    if not hit:
        return None
    layouts = ", ".join(sorted(set(hit)))
    return (
        f"the source holds quantized tensors ({layouts}) as codes and scales: load with "
        ".with_dequantize('bf16') (or 'f16', 'f32') to decode each into the model"
    )


def restricted_load_snapshots(
    whole: Any,
    options: StoreOptions,
    filename: str,
    remapped: Callable[[list[TensorSnapshot]], list[TensorSnapshot]],
) -> tuple[list[TensorSnapshot], list[str]] | list[TensorSnapshot]:
    """A load from the set `whole` reads, restricted to the tensors the filter keeps: their
    snapshots (`remapped`, checked against their digests) and the names left out; or, when
    the load needs the whole set (a filter that keeps all, a quantized group the filter would
    split), the whole reader's own snapshots, for the store to cache."""
    dequantize = options.dequantize
    restriction = restricted_for_load(whole, options, filename)
    if restriction is None:
        return source_snapshots(whole, filename, dequantize)
    reader, dropped = restriction
    with collector_paused():
        read = source_snapshots(reader, filename, dequantize)
        if may_be_grouped(read):  # a group's parts the filter left out: judge them all
            return source_snapshots(whole, filename, dequantize)
        snapshots = remapped(read)
    verify_before_load(reader)
    return snapshots, dropped
