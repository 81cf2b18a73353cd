"""Layout rules: operations bound to tensor names, and the rule sets (`Layout`) that stores
take as adapters, with their inverses derived.

A rule's sources are regexes, each matched against whole names; its targets are replacement
templates filled from the captures (``with_key_remapping``'s syntax). The captures the targets
use say which tensors form one group (one layer's ``q``, ``k`` and ``v``); a source capture no
target uses numbers the members of a list (``experts.(\\d+)``), which must run 0, 1, 2...; a
target reference no source has numbers a list of outputs. A group's inputs are each source
pattern's members in order, its outputs fill the targets in order (a numbered target takes as
many as the list holds).

The inverse swaps the names and inverts the operations: at once where no shape is needed
(`Split` -> `Concat`, `Stack` -> `Unstack`), else per group from the shapes of the tensors it
makes (``Concat`` -> ``Split`` by the parts' sizes), which a load knows from the model and a
save from `Layout.with_target_shapes` (`LayoutPlan.inverse` fills it from a load).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from weightstore.adapters._base import Adapter
from weightstore.adapters._layout_names import (
    Key,
    capture_keys,
    compile_source,
    parse_target,
    pattern_of_template,
    template_of_pattern,
)
from weightstore.adapters._layout_ops import (
    Chunk,
    Concat,
    Deinterleave,
    Interleave,
    LayoutOp,
    Permute,
    Pipeline,
    Split,
    Stack,
    Unstack,
)  # Unstack's inverse needs its inputs' count: it is derived per group
from weightstore.base._record import ValueRecord, field
from weightstore.errors import LayoutError
from weightstore.paths._regex import GroupRef, Replacement
from weightstore.snapshot import TensorSnapshot

__all__ = ["Layout", "LayoutRule", "Shape"]

Shape = tuple[int, ...]
"""A tensor's shape, as the operations plan it."""
_OPS: dict[str, type[LayoutOp]] = {
    op.__name__: op
    for op in (Split, Concat, Chunk, Stack, Unstack, Permute, Interleave, Deinterleave, Pipeline)
}


class LayoutRule(ValueRecord):
    """N source tensors into M targets by `ops` (see the module docstring).

    Attributes:
        sources: regexes, one per kind of input, matched against whole names.
        targets: replacement templates, one per kind of output.
        ops: the operations, run in order on the group's inputs.
        name: what errors and plans call the rule (default: its targets).
        inverse_of: the operations are another rule's, to be inverted per group from the
            shapes of this rule's targets.
    """

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    ops: tuple[LayoutOp, ...]
    name: str = ""
    inverse_of: bool = False
    regexes: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    templates: tuple[Replacement, ...] = field(init=False, repr=False, compare=False)
    group_keys: tuple[Key, ...] = field(init=False, repr=False, compare=False)
    source_index: Key | None = field(init=False, repr=False, compare=False)
    target_index: Key | None = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        ops: Sequence[LayoutOp],
        name: str = "",
        inverse_of: bool = False,
    ) -> None:
        super().__init__(tuple(sources), tuple(targets), tuple(ops), name, inverse_of)

    def __post_init__(self) -> None:
        if not self.name:
            self._set("name", " + ".join(self.targets))
        if not self.sources or not self.targets:
            raise self.error("needs at least one source and one target")
        if not all(isinstance(op, LayoutOp) for op in self.ops):
            raise self.error("takes operations such as Concat(0) or Split(0, (64, 16, 16))")
        regexes = tuple(compile_source(pattern) for pattern in self.sources)
        keys = {capture_keys(regex) for regex in regexes}
        if len(keys) != 1:
            raise self.error("every source pattern must have the same captures")
        (source_keys,) = keys
        templates = tuple(parse_target(target) for target in self.targets)
        referenced = {i.key for t in templates for i in t if isinstance(i, GroupRef)}
        source_index, target_index = source_keys - referenced, referenced - source_keys
        if len(source_index) + len(target_index) > 1:
            raise self.error(
                "may number one list, by one capture no target uses (sources) or one "
                f"reference no source has (targets); unused: {sorted(map(str, source_index))}, "
                f"unknown: {sorted(map(str, target_index))}"
            )
        self._set("regexes", regexes)
        self._set("templates", templates)
        self._set("group_keys", tuple(sorted(source_keys & referenced, key=str)))
        self._set("source_index", next(iter(source_index), None))
        self._set("target_index", next(iter(target_index), None))

    def error(
        self, detail: str, *, sources: tuple[str, ...] = (), targets: tuple[str, ...] = ()
    ) -> LayoutError:
        """A `LayoutError` naming this rule (and the group's `sources`, `targets`)."""
        return LayoutError(detail, rule=self.name, sources=sources, targets=targets)

    def inverse(self) -> LayoutRule:
        """The rule that turns this one's targets back into its sources, bit for bit."""
        numbered = frozenset() if self.target_index is None else frozenset({self.target_index})
        bodies: dict[str, str] = {}
        targets = tuple(_render(template_of_pattern(p, bodies)) for p in self.sources)
        sources = tuple(pattern_of_template(t, numbered, bodies) for t in self.templates)
        name = _inverse_name(self.name)
        if self.inverse_of:
            return LayoutRule(sources, targets, self.ops, name)
        blind = _blind_inverse(self.ops)
        if blind is not None:
            return LayoutRule(sources, targets, blind, name)
        return LayoutRule(sources, targets, self.ops, name, inverse_of=True)

    def group_op(self, shapes: Sequence[Shape], target_shapes: Sequence[Shape] | None) -> LayoutOp:
        """The operation one group runs: inputs of `shapes` into targets of `target_shapes`
        (None where not all are known).

        Raises:
            LayoutError: the operations need the targets' shapes and they are unknown.
        """
        if self.inverse_of:
            if target_shapes is None:
                blind = _blind_inverse(self.ops)
                if blind is None:
                    raise self.error(
                        "needs the shapes of its targets to invert "
                        f"{', '.join(map(repr, self.ops))}: load into a model, or give them "
                        "with Layout.with_target_shapes (LayoutPlan.inverse does after a load)"
                    )
                return Pipeline(blind)
            return Pipeline(self.ops).inverse(target_shapes)
        ops = list(self.ops)
        if ops and isinstance(ops[-1], Split) and not ops[-1].sizes:
            if target_shapes is None:
                raise self.error(
                    "splits by its targets' sizes, which are unknown here: load into a "
                    "model, or give the sizes (Split(dim, sizes) in a --layout-file)"
                )
            axis = ops[-1].dim
            ops[-1] = Split(axis, tuple(shape[axis] for shape in target_shapes))
        return Pipeline(tuple(ops))

    def to_json(self) -> dict[str, Any]:
        """The rule as `Layout.to_json` writes it."""
        made: dict[str, Any] = {
            "name": self.name,
            "sources": list(self.sources),
            "targets": list(self.targets),
            "ops": [_op_json(op) for op in self.ops],
        }
        if self.inverse_of:
            made["inverse_of"] = True
        return made


def _inverse_name(name: str) -> str:
    """``inverse of X`` for `X`, and `X` again for ``inverse of X``."""
    prefix = "inverse of "
    return name[len(prefix) :] if name.startswith(prefix) else prefix + name


def _render(template: Replacement) -> str:
    return "".join(
        item.replace("$", "$$") if isinstance(item, str) else f"${{{item.key}}}"
        for item in template
    )


def _blind_inverse(ops: Sequence[LayoutOp]) -> tuple[LayoutOp, ...] | None:
    """The inverse of `ops` where no shape is needed to write it, else None."""
    inverses: list[LayoutOp] = []
    for op in reversed(ops):
        if isinstance(op, (Split, Chunk)):
            inverses.append(Concat(op.dim))
        elif isinstance(op, Stack):
            inverses.append(Unstack(op.dim))
        elif isinstance(op, Permute):
            inverses.append(Permute(tuple(sorted(range(len(op.axes)), key=op.axes.__getitem__))))
        elif isinstance(op, Deinterleave):
            inverses.append(Interleave(op.dim, op.groups))
        elif isinstance(op, Pipeline):
            inner = _blind_inverse(op.steps)
            if inner is None:
                return None
            inverses.extend(inner)
        else:
            return None
    return tuple(inverses)


def _op_json(op: LayoutOp) -> dict[str, Any]:
    made: dict[str, Any] = {"op": type(op).__name__}
    for name in type(op)._FIELDS:
        value = getattr(op, name)
        made[name] = [_op_json(s) for s in value] if name == "steps" else value
    return {k: list(v) if isinstance(v, tuple) else v for k, v in made.items()}


def _op_from_json(data: Any) -> LayoutOp:
    if not isinstance(data, dict) or data.get("op") not in _OPS:
        raise LayoutError(f"an operation is one of {sorted(_OPS)} as {{'op': name, ...}}: {data!r}")
    kind = _OPS[data["op"]]
    values = {k: v for k, v in data.items() if k != "op"}
    if kind is Pipeline:
        values["steps"] = tuple(_op_from_json(s) for s in values.get("steps", ()))
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        made: LayoutOp = kind(**values)
    except TypeError as err:
        raise LayoutError(f"operation {data!r}: {err}") from err
    return made


class Layout(Adapter):
    """A set of layout rules, given to a store as an adapter: ``with_from_adapter`` on load
    (sources are the file's names, targets the model's), ``with_to_adapter`` on save (sources
    the model's, targets the file's). Rules run before the per-tensor adapters on load and
    after them on save (docs/layouts.md); a tensor no rule matches passes unchanged.

    Attributes:
        rules: the rules, each claiming the tensors its sources match (two claiming one
            tensor is an error).
        target_shapes: the shapes of tensors the rules make, for inverses that need them.
        name: what a plan prints.
    """

    def __init__(
        self,
        rules: Iterable[LayoutRule],
        target_shapes: Mapping[str, Sequence[int]] | None = None,
        name: str = "",
    ) -> None:
        self.rules = tuple(rules)
        self.target_shapes = {k: tuple(v) for k, v in (target_shapes or {}).items()}
        self.name = name

    def adapt(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        """`snapshot` itself: a layout acts on the whole list (`rewrite_layout`)."""
        return snapshot

    def inverse(self) -> Layout:
        """The layout that undoes this one, rule by rule."""
        name = _inverse_name(self.name) if self.name else ""
        return Layout([rule.inverse() for rule in self.rules], name=name)

    def with_target_shapes(self, shapes: Mapping[str, Sequence[int]]) -> Layout:
        """The same rules, told the shapes of the tensors they make."""
        return Layout(self.rules, {**self.target_shapes, **shapes}, self.name)

    def to_json(self) -> str:
        """The rules as JSON (``convert --layout-file`` reads it back)."""
        data = {"name": self.name, "rules": [rule.to_json() for rule in self.rules]}
        return json.dumps(data, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Layout:
        """The layout `to_json` wrote, or a user's rules in the same form.

        Raises:
            LayoutError: the text is no such rule set.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise LayoutError(f"a layout file is JSON: {err}") from err
        if isinstance(data, list):
            data = {"rules": data}
        if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
            raise LayoutError('a layout file is {"rules": [{"sources": ..., "targets": ..., ...}]}')
        rules = []
        for rule in data["rules"]:
            if not isinstance(rule, dict) or not {"sources", "targets", "ops"} <= rule.keys():
                raise LayoutError(f"a rule has sources, targets and ops: {rule!r}")
            ops = [_op_from_json(op) for op in rule["ops"]]
            name, inverse_of = str(rule.get("name", "")), bool(rule.get("inverse_of", False))
            rules.append(LayoutRule(rule["sources"], rule["targets"], ops, name, inverse_of))
        return cls(rules, name=str(data.get("name", "")))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return (self.rules, self.target_shapes) == (other.rules, other.target_shapes)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        rules = "".join(f"\n    {rule!r}," for rule in self.rules)
        name = f", name={self.name!r}" if self.name else ""
        return f"Layout([{rules}\n]{name})"
