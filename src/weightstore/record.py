"""`ModuleRecord`: the simple API. Take a model's tensors, save them, load them, put them back.

A record is what Burn's ``ModuleRecord`` is: every tensor of a model with its path and parameter
id, saved as a burnpack file with no metadata map and a ``param_id`` on every tensor, so
``record.save`` writes what Burn's ``ModuleRecord::save`` writes. Unlike a store it is strict by
default: a load fails when the model and the record disagree in any way (missing, unused or
mismatched tensors), unless the record is told to allow it; and a failing load is judged
before anything is written, so the model is left as it was (see `transfer.apply`).

    record = into_record(model)
    path = record.save("checkpoint")          # -> "checkpoint.bpk"; refuses to replace a file
    load_record(model, ModuleRecord.load(path))

One departure from Burn: Burn's record save replaces an existing file; ours refuses unless
asked with `ModuleRecord.overwrite`, as every weightstore save does.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Sequence

import numpy as np

from weightstore.adapters import Adapter
from weightstore.base._record import ValueRecord
from weightstore.burnpack import BurnpackReader, BurnpackWriter
from weightstore.entry import TensorEntry
from weightstore.errors import LoadFailedError
from weightstore.paths import PathFilter
from weightstore.report import ApplyResult, LoadFailure
from weightstore.snapshot import TensorSnapshot
from weightstore.transfer._apply import DTypePolicy, apply, collect
from weightstore.transfer._plan import LoadRules

__all__ = ["ModuleRecord", "into_record", "load_record", "try_load_record"]


class ModuleRecord(ValueRecord):
    """A model's tensors, by path, with parameter ids, and how strictly to load them.

    Attributes:
        snapshots: the tensors, in model order.
        partial: a load may leave model tensors the record lacks (set by `allow_partial`).
        unused: a load may ignore record tensors the model lacks (set by `allow_unused`).
        check_shapes: shape, dtype and data errors fail the load (set by `strict_shapes`; Burn's
            ``validate``).
        dtype_policy: ``"from_record"`` (default: the model takes the record's dtype, as Burn),
            ``"cast"`` (converted to the model's dtype), or ``"exact"`` (set by
            `with_dtype_policy`).
        overwrite_file: `save` may replace an existing file (set by `overwrite`).
        source: the file the record was read from, named in errors and reports; None for a
            record made from a model or from bytes.
    """

    snapshots: tuple[TensorSnapshot, ...]
    partial: bool = False
    unused: bool = False
    check_shapes: bool = True
    dtype_policy: DTypePolicy = "from_record"
    overwrite_file: bool = False
    source: str | None = None

    # -- making records -------------------------------------------------------------------------

    @classmethod
    def from_module(
        cls, model: object, filter: PathFilter | None = None, adapter: Adapter | None = None
    ) -> ModuleRecord:
        """The model's tensors as they are now, copied so later training does not change the
        record.

        Args:
            model: a torch module or a nested dict of NumPy arrays.
            filter: keep only the tensors it matches; all of them when omitted.
            adapter: applied to each tensor as it is collected (``PyTorchToBurnAdapter`` to
                record in Burn's layout).

        Returns:
            A strict record; each tensor carries the model's stable parameter id, or a fresh
            random u64 when the model has none.
        """
        snapshots = []
        for snapshot in collect(model, filter, adapter):
            array = np.array(snapshot.to_numpy(), copy=True)
            param_id = snapshot.param_id if snapshot.param_id is not None else _new_id()
            snapshots.append(
                TensorSnapshot.from_array(snapshot.full_path, array, snapshot.container, param_id)
            )
        return cls(tuple(snapshots))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModuleRecord:
        """Read a record file (``.bpk`` appended when the path has no extension and is absent).

        Tensors are views of the mapped file until loaded into a model.

        The record remembers the file (`source`), so errors and reports name it.

        Raises:
            FormatError: the file is not a valid burnpack file (bad magic, damaged metadata,
                data shorter than its descriptors claim).
            OSError: the file cannot be opened.
        """
        reader = BurnpackReader.from_file(path)
        return cls._from_reader(reader).replace(source=reader.path)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> ModuleRecord:
        """A record read from burnpack bytes in memory (what `into_bytes` returns); a mutable
        buffer is copied first, so later writes to it do not change the record.

        Raises:
            FormatError: `data` is not a valid burnpack file.
        """
        return cls._from_reader(BurnpackReader.from_bytes(data))

    @classmethod
    def _from_reader(cls, reader: BurnpackReader) -> ModuleRecord:
        """Snapshots in file order; a tensor without a ``param_id`` gets a fresh random one."""
        ordered = sorted(reader.descriptors.values(), key=lambda d: d.data_offsets)
        return cls(
            tuple(
                TensorSnapshot(
                    tuple(d.name.split(".")),
                    d.dtype,
                    d.shape,
                    functools.partial(reader.get, d.name),
                    param_id=d.param_id if d.param_id is not None else _new_id(),
                )
                for d in ordered
            )
        )

    # -- settings -------------------------------------------------------------------------------

    def allow_partial(self, allow: bool = True) -> ModuleRecord:
        """A copy whose loads leave model tensors the record lacks as they are, instead of
        failing; they are still listed in the result's ``missing``."""
        return self.replace(partial=allow)

    def allow_unused(self, allow: bool = True) -> ModuleRecord:
        """A copy whose loads ignore record tensors the model does not have, instead of
        failing; they are still listed in the result's ``unused``."""
        return self.replace(unused=allow)

    def strict_shapes(self, strict: bool = True) -> ModuleRecord:
        """A copy whose loads fail (``strict``, the default) or only report (``False``) when a
        tensor is found but cannot be loaded: wrong shape, lossy dtype, unreadable data."""
        return self.replace(check_shapes=strict)

    def validate(self, validate: bool = True) -> ModuleRecord:
        """Alias of `strict_shapes` under Burn's name for the setting (``validate``), so code
        ported from Rust reads the same."""
        return self.strict_shapes(validate)

    def overwrite(self, overwrite: bool = True) -> ModuleRecord:
        """A copy whose `save` replaces an existing file (atomically) instead of raising
        `DestinationExistsError`. Burn's record save always replaces; ours asks, as every
        weightstore save does (a store's ``.overwrite()``)."""
        return self.replace(overwrite_file=overwrite)

    def with_dtype_policy(self, policy: DTypePolicy) -> ModuleRecord:
        """A copy that loads with `policy`: ``"from_record"`` (the model takes the record's
        dtype), ``"cast"`` (converted to the model's dtype) or ``"exact"`` (converted only
        without loss, else reported as a dtype mismatch)."""
        return self.replace(dtype_policy=policy)

    def cast_to_module_dtype(self) -> ModuleRecord:
        """Convert tensors to the model's dtypes on load, even when that loses precision."""
        return self.with_dtype_policy("cast")

    # -- saving ---------------------------------------------------------------------------------

    def _writer(self) -> BurnpackWriter:
        """A writer of every tensor with its parameter id and no metadata map."""
        entries = [
            TensorEntry(s.full_path, s.dtype, s.shape, s.to_numpy, s.param_id)
            for s in self.snapshots
        ]
        return BurnpackWriter(entries)  # no metadata map, as Burn's ModuleRecord writes

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the record as a burnpack file, atomically. An existing file is replaced only
        after `overwrite` (Burn replaces it always).

        Args:
            path: the file to write; ``.bpk`` is appended when it has no extension.

        Returns:
            The path written, extension included.

        Raises:
            DestinationExistsError: the file exists and `overwrite` was not called.
        """
        return self._writer().save(path, overwrite=self.overwrite_file, auto_extension=True)

    def into_bytes(self) -> bytes:
        """The bytes `save` would write, in memory (Burn's ``ModuleRecord`` to bytes)."""
        return self._writer().to_bytes()

    def __len__(self) -> int:
        return len(self.snapshots)

    def keys(self) -> list[str]:
        """The tensors' dotted paths, in record order."""
        return [s.full_path for s in self.snapshots]


def _new_id() -> int:
    """A random u64 parameter id, as Burn gives a parameter that has none."""
    return secrets.randbits(64)


def into_record(
    model: object, filter: PathFilter | None = None, adapter: Adapter | None = None
) -> ModuleRecord:
    """Shorthand for `ModuleRecord.from_module`."""
    return ModuleRecord.from_module(model, filter, adapter)


def try_load_record(
    model: object,
    record: ModuleRecord,
    *,
    adapter: Adapter | None = None,
    device: object = None,
) -> ApplyResult:
    """Load `record` into `model` and return the report, whatever it says; the record's
    allowances are not consulted (compare `load_record`).

    Args:
        model: a torch module or a nested dict of NumPy arrays; its tensors are overwritten.
        record: the tensors to load, and the dtype policy to load them with.
        adapter: applied to each record tensor before it is loaded.
        device: where new torch tensors go; ``None`` keeps each parameter's device.

    Returns:
        What was applied, missing, unused or failed.
    """
    snapshots: Sequence[TensorSnapshot] = record.snapshots
    return apply(
        model,
        snapshots,
        None,
        adapter,
        device=device,
        dtype_policy=record.dtype_policy,
        source_path=record.source,
    )


def load_record(
    model: object,
    record: ModuleRecord,
    *,
    adapter: Adapter | None = None,
    device: object = None,
) -> ApplyResult:
    """Load `record` into `model`, failing on any disagreement the record does not allow.

    Example:
        >>> load_record(model, ModuleRecord.load("checkpoint").allow_unused())

    Args:
        model: a torch module or a nested dict of NumPy arrays; its tensors are overwritten.
        record: the tensors to load, with its allowances and dtype policy.
        adapter: applied to each record tensor before it is loaded.
        device: where new torch tensors go; ``None`` keeps each parameter's device.

    Returns:
        The report, when the load succeeded within the record's allowances.

    Raises:
        LoadFailedError: checked in this order: a tensor cannot load (unless
            ``strict_shapes(False)``), nothing would load at all (no allowance accepts that),
            model tensors are missing (unless ``allow_partial()``), record tensors are unused
            (unless ``allow_unused()``). The load is judged before anything is written, so the
            model is unchanged (``error.result.refused``), except for what only the model's
            own load code or the data can tell (see `transfer.apply`).
    """
    rules = LoadRules(
        validate=record.check_shapes, allow_partial=record.partial, allow_unused=record.unused
    )
    snapshots: Sequence[TensorSnapshot] = record.snapshots
    result = apply(
        model,
        snapshots,
        None,
        adapter,
        device=device,
        dtype_policy=record.dtype_policy,
        source_path=record.source,
        rules=rules,
    )
    failure = result.refused or rules.failure(result)
    if failure is None:
        return result
    raise LoadFailedError(result, failure, _record_fix(result, failure, record), path=record.source)


def _record_fix(result: ApplyResult, failure: LoadFailure, record: ModuleRecord) -> str:
    """What to do about `failure` of a record load, as the calls that do it."""
    adapter = result.fix_adapter()
    errors_fix = (
        f"pass adapter={adapter} to load_record"
        if adapter is not None
        else "fix the model or the record (each error says how)"
    )
    if failure == "errors":
        these = "this tensor" if len(result.errors) == 1 else f"these {len(result.errors):,}"
        leave = f"use record.strict_shapes(False) to load the rest and leave {these} unloaded"
        return f"{errors_fix}, or {leave}"
    if failure == "unused":
        return "use record.allow_unused(True) to ignore them"
    layout = result.layout_change()
    change = result.prefix_change() if layout is None else None
    store = (  # a record cannot rename; a store over its bytes can
        f"BurnpackStore.from_file({record.source!r})"
        if record.source is not None
        else "BurnpackStore.from_bytes(record.into_bytes())"
    )
    renamed = ""
    if layout is not None and layout.prefix is None:
        renamed = f"{layout}: pass adapter={layout.adapter} to load_record"
    elif layout is not None:
        renamed = f"{layout}: load it with {store}{layout.fix()}"
    elif change is not None:
        renamed = f"{change}: load it with {store}{change.fix()}"
    if failure == "nothing_loaded":
        compare = "compare the record's names (record.keys()) with the model's"
        fixes = [renamed or compare] if result.missing else []
        fixes += [errors_fix] if result.errors else []
        return "; ".join([*fixes, "no allowance accepts a load that loads nothing"])
    if not result.partial_load_advisable():  # most of the model would stay unloaded
        return renamed or "compare the record's names (record.keys()) with the model's"
    leave = "use record.allow_partial(True) to leave them as they are"
    return f"{renamed}, or {leave}" if renamed else leave
