"""Running a `Layout` over a list of snapshots, lazily: names and shapes are planned at once
(no data read), and each group's data is made when its first output is asked for.

A group reads its inputs once for all its outputs and keeps them until every output has been
taken, then lets them go; a load that takes a group's outputs one after another (the model's
order) holds one group at a time. A group that cannot be made (a member missing, shapes that
do not fit the operations or the targets, dtypes that differ) is a `LayoutError` in the plan,
and its sources pass on unchanged, so a load reports them unused and its targets missing.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from weightstore.adapters._base import Adapter, ChainAdapter
from weightstore.adapters._layout_names import Key, pattern_of_template
from weightstore.adapters._layout_ops import LayoutOp
from weightstore.adapters._layout_rules import Layout, LayoutRule, Shape
from weightstore.base._record import ValueRecord, field
from weightstore.errors import LayoutError
from weightstore.paths._regex import GroupRef, Replacement
from weightstore.snapshot import TensorSnapshot

__all__ = ["LayoutGroup", "LayoutPlan", "layouts_in", "rewrite_layout", "rewrite_layouts"]


class LayoutGroup(ValueRecord):
    """One group a rule makes: which tensors in, which out, of what shapes.

    Attributes:
        rule: the rule's name.
        sources: the input tensors, in the order the operations take them.
        source_shapes: their shapes.
        targets: the output tensors.
        shapes: their shapes.
        op: the operation the group runs (the rule's, with sizes and inverses settled for
            these shapes).
    """

    rule: str
    sources: tuple[str, ...]
    source_shapes: tuple[Shape, ...]
    targets: tuple[str, ...]
    shapes: tuple[Shape, ...]
    op: LayoutOp | None = field(default=None, repr=False, compare=False)


class LayoutPlan:
    """What a layout does to one source: its groups, its problems, and (for a load) the model
    tensors nothing provides.

    Attributes:
        layout: the layout planned.
        groups: each group made, in source order.
        problems: each group or rule that failed, as the error that names it.
        missing: model tensors that neither a rule nor a source tensor provides (known only
            when planned against a model).
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.groups: list[LayoutGroup] = []
        self.problems: list[LayoutError] = []
        self.missing: list[str] = []

    def inverse(self) -> Layout:
        """The layout that saves what this plan made back to its sources' names and shapes."""
        shapes = {
            name: shape
            for group in self.groups
            for name, shape in zip(group.sources, group.source_shapes, strict=True)
        }
        return self.layout.inverse().with_target_shapes(shapes)

    def __str__(self) -> str:
        lines = [f"{len(self.groups)} groups, {len(self.problems)} problems"]
        for group in self.groups:
            pairs = zip(group.targets, group.shapes, strict=True)
            made = ", ".join(f"{target} {list(shape)}" for target, shape in pairs)
            lines.append(f"  {group.rule}: {', '.join(group.sources)} -> {made}")
        lines.extend(f"  problem: {problem}" for problem in self.problems)
        if self.missing:
            lines.append(f"  missing (no rule, no tensor): {', '.join(self.missing)}")
        return "\n".join(lines)


def layouts_in(adapter: Adapter | None) -> list[Layout]:
    """The layouts in an adapter chain, in chain order."""
    if isinstance(adapter, Layout):
        return [adapter]
    if isinstance(adapter, ChainAdapter):
        return layouts_in(adapter.first) + layouts_in(adapter.second)
    return []


def rewrite_layouts(
    adapter: Adapter | None,
    snapshots: Sequence[TensorSnapshot],
    target_shapes: Mapping[str, Shape] | None = None,
) -> tuple[list[TensorSnapshot], LayoutPlan | None]:
    """`snapshots` through every layout in `adapter`'s chain, in order (`rewrite_layout`
    each), and one plan of them all; the snapshots unchanged and None when the chain holds
    no layout. What loads, saves and `Store.plan` run."""
    plan: LayoutPlan | None = None
    rewritten = list(snapshots)
    for layout in layouts_in(adapter):
        rewritten, step = rewrite_layout(layout, rewritten, target_shapes)
        if plan is not None:  # one report: every layout's groups and problems, the last's gaps
            step.groups[:0], step.problems[:0] = plan.groups, plan.problems
        plan = step
    return rewritten, plan


class _GroupRun:
    """One group's outputs, made on the first ask and held until each has been taken."""

    def __init__(self, inputs: list[TensorSnapshot], op: LayoutOp, count: int) -> None:
        self.inputs, self.op, self.count = inputs, op, count
        self._outputs: list[Any] | None = None
        self._left: set[int] = set()
        self._lock = threading.Lock()

    def take(self, index: int) -> Any:
        with self._lock:
            if self._outputs is None or index not in self._left:
                self._outputs = self.op.apply([s.to_numpy() for s in self.inputs])
                self._left = set(range(self.count))
            made = self._outputs[index]
            self._left.discard(index)
            if not self._left:
                self._outputs = None
            return made


def rewrite_layout(
    layout: Layout,
    snapshots: Sequence[TensorSnapshot],
    target_shapes: Mapping[str, Shape] | None = None,
) -> tuple[list[TensorSnapshot], LayoutPlan]:
    """`snapshots` with each rule's groups replaced by their outputs (lazy), and the plan.

    `target_shapes` are the shapes of the tensors the outputs are meant for (a model's on
    load); an output whose shape differs is a problem, and a rule whose targets the model has
    but which matched nothing is one too. Without them, `layout.target_shapes` serve.

    Raises:
        LayoutError: two rules, or two source patterns of one rule, claim one tensor; or an
            output takes a name another tensor has.
    """
    plan = LayoutPlan(layout)
    shapes = dict(layout.target_shapes) if target_shapes is None else dict(target_shapes)
    claims: dict[int, list[tuple[int, re.Match[str], TensorSnapshot]]] = {}
    claimed: dict[str, str] = {}
    for snapshot in snapshots:
        name = snapshot.full_path
        for r, rule in enumerate(layout.rules):
            for s, regex in enumerate(rule.regexes):
                found = regex.fullmatch(name)
                if found is None:
                    continue
                if name in claimed:
                    raise rule.error(
                        f"claims {name!r}, which {claimed[name]!r} claims too", sources=(name,)
                    )
                claimed[name] = rule.name
                claims.setdefault(r, []).append((s, found, snapshot))
    made: dict[str, list[TensorSnapshot]] = {}  # first source name -> outputs placed there
    passed: set[str] = set(claimed)
    for r, rule in enumerate(layout.rules):
        for members in _groups(rule, claims.get(r, [])):
            outputs = _plan_group(rule, members, shapes, plan)
            if outputs is not None:  # placed where the group's first input was
                made[members[0][2].full_path] = outputs
                passed.difference_update(m[2].full_path for m in members)
        if r not in claims and target_shapes is not None:
            _unmatched(rule, target_shapes, plan)
    result: list[TensorSnapshot] = []
    for snapshot in snapshots:
        name = snapshot.full_path
        if name not in claimed or name in passed:
            result.append(snapshot)
        result.extend(made.get(name, ()))
    _refuse_collisions(result)
    if target_shapes is not None:
        present = {s.full_path for s in result}
        plan.missing = [name for name in target_shapes if name not in present]
    return result, plan


_Member = tuple[int, int, TensorSnapshot]  # (source pattern, list index, snapshot)


def _groups(
    rule: LayoutRule, claims: list[tuple[int, re.Match[str], TensorSnapshot]]
) -> list[list[_Member]]:
    """`claims` grouped by the captures the targets use; each member's list index (0 when
    the sources number no list)."""
    grouped: dict[tuple[str, ...], list[_Member]] = {}
    for source, found, snapshot in claims:
        key = tuple(found.group(k) or "" for k in rule.group_keys)
        index = -1 if rule.source_index is None else _number(found.group(rule.source_index))
        grouped.setdefault(key, []).append((source, index, snapshot))
    return list(grouped.values())


def _number(text: str | None) -> int:
    return int(text) if text is not None and text.isdigit() else -2  # -2: not a number


def _plan_group(
    rule: LayoutRule, members: list[_Member], shapes: dict[str, Shape], plan: LayoutPlan
) -> list[TensorSnapshot] | None:
    """The lazy outputs of one group, its `LayoutGroup` in `plan`; None (a problem in `plan`)
    when the group cannot be made."""
    members.sort(key=lambda m: (m[0], m[1]))
    inputs = [m[2] for m in members]
    sources = tuple(s.full_path for s in inputs)
    captures = _captures(rule, members[0][2].full_path, members[0][0])
    try:
        _check_members(rule, members)
        if len({s.dtype for s in inputs}) != 1:
            dtypes = sorted({s.dtype.name for s in inputs})
            raise rule.error(f"takes tensors of one dtype, not {dtypes} (it casts nothing)")
        in_shapes = [s.shape for s in inputs]
        names = _target_names(rule, captures, None, shapes)
        known = None if names is None or any(n not in shapes for n in names) else names
        op = rule.group_op(in_shapes, None if known is None else [shapes[n] for n in known])
        out_shapes = op.output_shapes(in_shapes)
        names = _target_names(rule, captures, len(out_shapes), shapes)
        assert names is not None
        if len(names) != len(out_shapes):
            raise rule.error(f"makes {len(out_shapes)} tensors for {len(names)} targets")
        for name, shape in zip(names, out_shapes, strict=True):
            if name in shapes and tuple(shapes[name]) != tuple(shape):
                raise rule.error(
                    f"makes {name!r} of shape {list(shape)}, but the target is {list(shapes[name])}"
                )
    except LayoutError as err:  # an operation's or the rule's: named with the group either way
        targets = tuple(_target_names(rule, captures, None, shapes) or ())
        plan.problems.append(rule.error(err.reason, sources=sources, targets=targets))
        return None
    run = _GroupRun(inputs, op, len(names))
    dtype = inputs[0].dtype
    plan.groups.append(LayoutGroup(rule.name, sources, tuple(in_shapes), tuple(names),
                                   tuple(map(tuple, out_shapes)), op))  # fmt: skip
    return [
        TensorSnapshot(tuple(name.split(".")), dtype, tuple(shape), functools.partial(run.take, i))
        for i, (name, shape) in enumerate(zip(names, out_shapes, strict=True))
    ]


def _check_members(rule: LayoutRule, members: list[_Member]) -> None:
    """Refuse a group without every source, or whose lists do not run 0, 1, 2... alike."""
    by_source: dict[int, list[int]] = {}
    for source, index, _ in members:
        by_source.setdefault(source, []).append(index)
    absent = [rule.sources[s] for s in range(len(rule.sources)) if s not in by_source]
    if absent:
        raise rule.error(f"has no member for {', '.join(map(repr, absent))}")
    for source, indices in by_source.items():
        expected = list(range(len(indices))) if rule.source_index is not None else [-1]
        if sorted(indices) != expected:
            raise rule.error(
                f"numbers the members of {rule.sources[source]!r} {sorted(indices)}; "
                f"expected {expected}"
            )
    if len({len(v) for v in by_source.values()}) != 1:
        counts = {rule.sources[s]: len(v) for s, v in by_source.items()}
        raise rule.error(f"has lists of different lengths: {counts}")


def _captures(rule: LayoutRule, name: str, source: int) -> dict[Key, str]:
    found = rule.regexes[source].fullmatch(name)
    assert found is not None
    return {key: found.group(key) or "" for key in rule.group_keys}


def _fill(template: Replacement, captures: Mapping[Key, str]) -> str:
    return "".join(i if isinstance(i, str) else captures[i.key] for i in template)


def _target_names(
    rule: LayoutRule, captures: dict[Key, str], count: int | None, shapes: Mapping[str, Shape]
) -> list[str] | None:
    """The group's target names; a numbered target takes `count` less the single targets,
    shared among the numbered ones (unknown `count`: as many as `shapes` has, or None)."""
    index = rule.target_index
    numbered = [t for t in rule.templates if index is not None and _refers(t, index)]
    if not numbered:
        return [_fill(t, captures) for t in rule.templates]
    assert index is not None
    if count is None:
        length = 0
        while _fill(numbered[0], {**captures, index: str(length)}) in shapes:
            length += 1
        if length == 0:
            return None
    else:
        length = (count - (len(rule.templates) - len(numbered))) // len(numbered)
    names: list[str] = []
    for template in rule.templates:
        if template in numbered:
            names.extend(_fill(template, {**captures, index: str(i)}) for i in range(length))
        else:
            names.append(_fill(template, captures))
    return names


def _refers(template: Replacement, key: Key) -> bool:
    return any(isinstance(i, GroupRef) and i.key == key for i in template)


def _unmatched(rule: LayoutRule, target_shapes: Mapping[str, Shape], plan: LayoutPlan) -> None:
    """A problem when the model has targets of `rule`, which matched no source tensor."""
    numbered = frozenset() if rule.target_index is None else frozenset({rule.target_index})
    patterns = [re.compile(pattern_of_template(t, numbered)) for t in rule.templates]
    wanted = tuple(n for n in target_shapes if any(p.fullmatch(n) for p in patterns))
    if wanted:
        plan.problems.append(
            rule.error(
                "matches no source tensor, and the model's tensors it would make stay "
                f"missing: {', '.join(wanted[:8])}{' ...' if len(wanted) > 8 else ''}",
                targets=wanted,
            )
        )


def _refuse_collisions(snapshots: Sequence[TensorSnapshot]) -> None:
    seen: set[str] = set()
    for snapshot in snapshots:
        name = snapshot.full_path
        if name in seen:
            raise LayoutError(
                f"a rule makes {name!r}, which the source holds already", targets=(name,)
            )
        seen.add(name)
