"""A store over a sharded set: how much of it a load reads.

Which reader opens a set is `weightstore.locate`'s answer; the one decision made here is how much
of the set a load must see: a store whose filter decides by name alone gets a reader
restricted to the tensors the filter keeps (`SetReader.restricted`), which never opens the
shards holding none of them. Anything that can match a file tensor to a model path under
another name (an adapter's alternative names, list renumbering, enum-variant skipping) or
that asks about module types (a predicate) needs every tensor, so then the reader is whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from weightstore.container._format import ContainerFormat
    from weightstore.sets._reader import SetReader, SetReport
    from weightstore.snapshot import TensorSnapshot
    from weightstore.stores._options import StoreOptions

__all__ = [
    "may_be_grouped",
    "read_set_report",
    "restricted_for_load",
    "wanted_names",
]


def restricted_for_load(
    reader: SetReader, options: StoreOptions, filename: str
) -> tuple[SetReader, list[str]] | None:
    """For a load with `options`: a reader restricted to the tensors its filter keeps
    (`wanted_names`), and the names (as the load sees them, remapped) it leaves out, which
    the load reports as unused as a single file's would; None when the load needs the whole
    set, or the reader cannot be restricted (a training checkpoint's)."""
    if options.dequantize is not None or not callable(getattr(reader, "restricted", None)):
        # The filter matches groups' logical names (gpt-oss's X for X_blocks + X_scales),
        # which no listed name is: a restriction by listed names would drop the group.
        return None
    listed = reader.listed_names()
    wanted = wanted_names(options, listed, filename)
    if wanted is None:
        return None
    kept = set(wanted)
    remapper = options.active_remapper()
    if remapper is None:
        dropped = [name for name in listed if name not in kept]
    else:
        renamed = remapper.remap_names(list(listed), path=filename)
        dropped = [new for new, old in renamed.items() if old not in kept]
    return reader.restricted(wanted), dropped


def read_set_report(
    fmt: ContainerFormat, filename: str, options: StoreOptions, reader_options: dict[str, Any]
) -> SetReport | None:
    """The whole set's `SetReport` (every shard's header read), or None for no set path (a
    torch.distributed.checkpoint directory has none: its index is checked as it opens)."""
    from weightstore.locate import Kind, _locate

    storage = reader_options.get("storage_options")
    location, _ = _locate(filename, storage, options.variant, keep=False, known=fmt)
    if location.kind is not Kind.SET:
        return None
    from weightstore.sets._reader import open_set

    with open_set(filename, fmt.name, variant=options.variant, **reader_options) as reader:
        return reader.report()


def wanted_names(options: StoreOptions, listed: Sequence[str], path: str) -> list[str] | None:
    """The names in `listed` that a load or conversion with `options` can use, when its
    filter decides that from the (remapped) names alone; None when it must see every one.

    Only what a filter drops is left out; the load lists those as unused, as it does for
    a single file (`restricted_for_load`).
    """
    kept = options.active_filter()
    if kept is None or kept.accept_all or kept.predicates:
        return None  # no filter, keep-all, or one that asks about module types
    if options.from_adapter is not None or options.map_indices_contiguous:
        return None  # a file tensor may fill a model path under another name
    if options.skip_enum_variants:
        return None
    remapper = options.active_remapper()
    if remapper is None:
        return [name for name in listed if kept.matches(name)]
    renamed = remapper.remap_names(list(listed), path=path)  # new name -> file name
    return [old for new, old in renamed.items() if kept.matches(new)]


def may_be_grouped(snapshots: Sequence[TensorSnapshot]) -> bool:
    """Whether a restricted read holds a tensor that may be part of a quantized group (a
    dtype codes have), whose companions the restriction may have left out."""
    from weightstore.quantized._view import CANDIDATE_DTYPES

    return any(s.dtype.name in CANDIDATE_DTYPES or s.group is not None for s in snapshots)
