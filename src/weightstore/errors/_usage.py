"""Errors about what a caller asked: dtypes, names, options, entries, slices, digests, and
the verdict of a load."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from weightstore.base._render import bounded_repr
from weightstore.errors._base import WeightstoreError


class DTypeError(WeightstoreError, TypeError):
    """A dtype that a format, NumPy, or the requested conversion cannot hold."""


class TensorNotFoundError(WeightstoreError, KeyError):
    """A tensor name that the file does not contain."""

    def __init__(self, tensor: str, *, path: str | None = None, known: int = 0) -> None:
        super().__init__(f"no such tensor (the file holds {known:,})", path=path, tensor=tensor)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return WeightstoreError.__str__(self)


class EntryError(WeightstoreError, ValueError):
    """A writer was handed an entry it cannot write: wrong byte length, duplicate name, ..."""


class QuantizeError(WeightstoreError, ValueError):
    """Values that a quantized block type cannot encode (NaN, infinity, a partial block), or a
    block type there is no quantizer for."""


class InvalidOptionError(WeightstoreError, ValueError):
    """A builder or function option that cannot work; raised at the call that set it.

    Attributes:
        option: the option at fault (``"top_level_key"``), when one is.
        format: the format that cannot honour it (``"burnpack"``), when that is the reason.
    """

    def __init__(
        self, detail: str, *, option: str | None = None, format: str | None = None
    ) -> None:
        self.detail = detail
        self.path = None
        self.tensor = None
        self.option = option
        self.format = format
        ValueError.__init__(self, detail)


class LayoutError(WeightstoreError, ValueError):
    """Tensors that a fused-layout operation or rule cannot take: a split whose sizes do not
    add up to its dim, a concatenation of tensors that differ off its dim, a rule whose
    members are incomplete or whose parts do not fit the tensors they are meant for.

    Attributes:
        operation: the operation, as it prints (``Split(dim=0, sizes=(64, 32, 32))``), or
            None for a rule's own failure.
        shapes: the shapes it was given (empty when no operation ran).
        rule: the layout rule's name, when a rule failed.
        sources: the source tensors of the rule's group, as far as known.
        targets: the tensors the group was to make, as far as known.
        reason: what went wrong, without the rule and names (to name another group with).
    """

    def __init__(
        self,
        detail: str,
        *,
        operation: str | None = None,
        shapes: tuple[tuple[int, ...], ...] = (),
        tensor: str | None = None,
        rule: str | None = None,
        sources: tuple[str, ...] = (),
        targets: tuple[str, ...] = (),
    ) -> None:
        self.reason = detail if operation is None else f"{operation}: {detail}"
        names = "; ".join(
            f"{label} {', '.join(map(bounded_repr, group[:6]))}{' ...' if len(group) > 6 else ''}"
            for label, group in (("sources", sources), ("targets", targets))
            if group
        )
        self.detail = (f"layout rule {rule!r}: " if rule is not None else "") + self.reason
        self.detail += f" ({names})" if names else ""
        self.path = None
        self.tensor = tensor
        self.operation = operation
        self.shapes = shapes
        self.rule, self.sources, self.targets = rule, sources, targets
        where = f"tensor {bounded_repr(tensor)}: " if tensor is not None else ""
        ValueError.__init__(self, where + self.detail)


class RemapCollisionError(WeightstoreError, ValueError):
    """Key remapping (or index mapping) gives two different tensors the same new name.

    Burn keeps whichever tensor it meets last, so the loaded model depends on iteration order;
    we refuse instead and name both sources so the rule can be fixed.

    Attributes:
        new: the name both tensors would receive.
        first, second: the two original names, in input order.
        cause: the rewrite that merged them (``"remapping"``, ``"skipping enum variants"``).
    """

    def __init__(
        self,
        new: str,
        first: str,
        second: str,
        *,
        path: str | None = None,
        cause: str = "remapping",
    ) -> None:
        self.new, self.first, self.second, self.cause = new, first, second, cause
        self.path, self.tensor = path, None
        self.detail = (
            f"{cause} gives {first!r} and {second!r} the same name {new!r}; "
            "change the patterns so that every name stays unique"
        )
        ValueError.__init__(self, f"{path}: {self.detail}" if path else self.detail)


class SliceError(WeightstoreError, IndexError):
    """An index into a lazily sliced tensor that is out of range or of a kind we do not read.

    Raised before any tensor byte is read, naming the file and tensor; NumPy raises `IndexError`
    for the same indices, so existing handlers keep working.
    """


class KeyNotFoundError(TensorNotFoundError):
    """A top-level key (or other entry name) that the file does not hold.

    Attributes:
        key: the key asked for.
        available: the keys that do exist at that level, in file order.
    """

    def __init__(
        self, key: str, available: list[str], *, path: str | None = None, what: str = "key"
    ) -> None:
        self.key, self.available = key, list(available)
        shown = ", ".join(repr(name) for name in available[:20])
        more = f" and {len(available) - 20:,} more" if len(available) > 20 else ""
        listing = f"the file has {shown}{more}" if available else "the file has no keys there"
        WeightstoreError.__init__(self, f"{what} {key!r} not found; {listing}", path=path)


class SnapshotLoadError(WeightstoreError, RuntimeError):
    """A snapshot's data could not be produced (its source failed or returned the wrong thing)."""


def _hex_shown(digest: str) -> str:
    """A digest as written: plain when it is hex of a digest's length, else quoted and
    bounded (the file chose it)."""
    if 0 < len(digest) <= 128 and all(c in "0123456789abcdefABCDEF" for c in digest):
        return digest
    return bounded_repr(digest, limit=80)


class DigestError(WeightstoreError, ValueError):
    """A digest the file carries cannot be checked: an algorithm unknown or not installed, or
    a ``weightstore.digests`` value that is not the JSON docs/integrity.md describes.

    Attributes:
        algorithm: the algorithm named, where one is.
    """

    def __init__(
        self,
        detail: str,
        *,
        path: str | None = None,
        tensor: str | None = None,
        algorithm: str | None = None,
    ) -> None:
        super().__init__(detail, path=path, tensor=tensor)
        self.algorithm = algorithm


class DigestMismatchError(DigestError):
    """A tensor's (or a shard file's) bytes hash to another digest than the file records: the
    bytes changed after the save. Raised before the tensor reaches the caller or the model.

    Attributes:
        expected: the hex digest recorded.
        found: the hex digest of the bytes read.
    """

    def __init__(
        self,
        algorithm: str,
        expected: str,
        found: str,
        *,
        path: str | None = None,
        tensor: str | None = None,
    ) -> None:
        self.expected, self.found = expected, found
        super().__init__(
            f"{algorithm} digest mismatch: expected {_hex_shown(expected)}, found "
            f"{_hex_shown(found)}; the bytes changed after the save",
            path=path,
            tensor=tensor,
            algorithm=algorithm,
        )


class SetWarning(UserWarning):
    """A set's directory holds files a load ignores that look like part of it (a stale single
    file, stray shards), or a shard disagrees with the index about what it holds. The load
    reads the set the index names; the warning says what was left out."""


# -- the load report's verdict ----------------------------------------------------------------


class LoadFailedError(WeightstoreError, ValueError):
    """A load broke one of its rules (`LoadRules`); `result` has every detail.

    When ``result.refused`` is set, the load was refused before anything was written and the
    model is unchanged: every failure names, shapes and dtypes show is found so. Otherwise the
    failure showed only while the model loaded (its own load code decided, or data failed to
    read), and the tensors in ``result.applied`` were written. The message's first line says
    what failed, whether the model changed, and what to do; the summary follows.

    Attributes:
        result: the load report, a `weightstore.ApplyResult` (typed loosely here: the report
            lives layers above the errors, which every layer imports).
        failure: the rule broken: ``"errors"``, ``"nothing_loaded"``, ``"missing"`` or
            ``"unused"``.
        fix: what to do, as the builder calls that do it.
    """

    def __init__(self, result: Any, failure: str, fix: str, *, path: str | None = None) -> None:
        self.result, self.failure, self.fix = result, failure, fix
        what = _FAILURE_TEXT[failure](result)
        super().__init__(f"{what}; {_written_text(result)}; {fix}\n\n{result}", path=path)


def _count(count: int, noun: str) -> str:
    """``"1 tensor"``, ``"2 tensors"``, ``"2 shape mismatches"``."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:,} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def _are(count: int, noun: str) -> str:
    """``"1 tensor is"``, ``"2 tensors are"``."""
    return f"{_count(count, noun)} {'is' if count == 1 else 'are'}"


def _errors_text(result: Any) -> str:
    """``"3 tensors cannot load (2 shape mismatches, 1 dtype mismatch)"``."""
    kinds = Counter(error.kind.replace("_", " ") for error in result.errors)
    listed = ", ".join(_count(number, kind) for kind, number in kinds.items())
    return f"{_count(len(result.errors), 'tensor')} cannot load ({listed})"


def _nothing_text(result: Any) -> str:
    """``"no tensor would load into the model (9 missing from the source)"``."""
    parts = [
        f"{len(result.missing):,} missing from the source" if result.missing else "",
        f"{len(result.skipped):,} filtered out" if result.skipped else "",
        f"{len(result.errors):,} failing the checks" if result.errors else "",
    ]
    verb = "would load" if result.refused else "loaded"
    return f"no tensor {verb} into the model ({', '.join(p for p in parts if p)})"


# What failed, per rule of LoadRules: the start of the error's first line.
_FAILURE_TEXT: Final[dict[str, Callable[[Any], str]]] = {
    "errors": _errors_text,
    "nothing_loaded": _nothing_text,
    "missing": lambda r: f"{_are(len(r.missing), 'model tensor')} missing from the source",
    "unused": lambda r: f"{_are(len(r.unused), 'source tensor')} not in the model",
}


def _written_text(result: Any) -> str:
    """Whether the failed load changed the model."""
    if result.refused is not None:
        return "nothing was written, the model is unchanged"
    if not result.applied:
        return "no tensor was written"
    count = len(result.applied)
    written = f"{_count(count, 'tensor')} {'was' if count == 1 else 'were'}"
    return (
        f"{written} written before this showed (the model's own load code decided it, or data "
        "failed to read): the model is partly loaded"
    )


class ModuleTypeNeededError(InvalidOptionError):
    """An adapter that decides by module type (the PyTorch <-> Burn layout, half precision)
    meets tensors whose owning module their names and shapes do not settle: they fit several
    types the adapter treats differently (a 2-D weight alone: Linear or Embedding), or a Linear
    laid out as the other framework lays it out (a file already converted). Guessing would
    write a file that only looks converted, so the caller names the type
    (`weightstore.adapters.assign_module_types`; ``--module-type`` on the command line).

    Attributes:
        tensors: every tensor at fault, in the source's order; the message names the first.
        candidates: the module types the first may be; empty for a Linear laid out the other
            way.
        misfit: True for a Linear laid out the other way, False for an ambiguous owner.
        subject: the first tensor and what its module holds, as the message shows them
            (``'emb.weight' (a 2-D weight with no bias: Linear or Embedding)``).
        others: the message's note on the rest (`` (2 more: 'a.weight', 'b.weight')``), or
            ``""``; the command line words its own message from `subject` and `others`.
    """

    def __init__(
        self,
        detail: str,
        *,
        tensors: tuple[str, ...],
        candidates: tuple[str, ...],
        misfit: bool,
        subject: str,
        others: str,
    ) -> None:
        super().__init__(detail, option="module_type")
        self.tensors = tensors
        self.candidates = candidates
        self.misfit = misfit
        self.subject = subject
        self.others = others
