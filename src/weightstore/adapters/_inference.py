"""Which module owns each tensor of a file, so that adapters keyed on module types can act on it.

Adapters decide by the type of the module owning a tensor (`TensorSnapshot.container`): a
Linear weight is transposed for Burn, a norm's ``weight`` becomes ``gamma``, BatchNorm stays out
of half precision. A model knows its modules; a file holds only names and shapes. So the owner
is inferred from the tensors one module holds (those sharing a name prefix,
`infer_module_types`):

    running_mean or running_var among them        BatchNorm
    gamma (Burn's name for a norm's scale)         LayerNorm (a norm: no adapter asks which)
    weight of rank 3, 4 or 5                       Conv1d, Conv2d, Conv3d (ConvTranspose alike)
    weight of rank 2, bias of its output size      Linear (torch: [out, in]; Burn: [in, out]);
                                                   a bias fitting only the other layout is a
                                                   misfit (the file is laid out the other way)
    weight of rank 1, bias of the same shape       LayerNorm
    weight of rank 2 alone                         Linear or Embedding: ambiguous
    weight of rank 1 alone                         RmsNorm or PRelu: ambiguous
    anything else, or other tensors beside them    no type: every adapter leaves it as it is

Hugging Face models' names then settle what shapes cannot (`_known_models`, with the
``config.json`` beside the file when given): GPT-2's ``c_attn``/``c_fc``/``c_proj`` are
transformers' Conv1D (``[in, out]``: Burn's Linear layout, so not transposed) unless the layout
is Burn's, ``wte``/``*_embeddings`` Embeddings, ``lm_head`` a Linear; a square ``c_proj``
nothing settles is ambiguous (Linear or Conv1D).

An ambiguous owner does not matter when the adapter treats every candidate alike (half
precision casts Linear and Embedding weights the same way): `assign_module_types` adapts a
small probe tensor as each candidate and compares. When it matters, or a Linear fits only the
other framework's layout, it raises `ModuleTypeNeededError` unless a rule names the type.
A model-free save (`save_into` from a store, reader or state dict) and ``weightstore convert``
both type their tensors here, so both refuse the same tensors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final, Literal

import numpy as np

from weightstore.adapters._base import Adapter, ChainAdapter
from weightstore.adapters._known_models import (
    CONV1D_MODULES,
    EMBEDDING_MODULE,
    HEAD_MODULES,
    ModelConfig,
)
from weightstore.adapters._precision import HalfPrecisionAdapter
from weightstore.adapters._pytorch_burn import BurnToPyTorchAdapter, PyTorchToBurnAdapter
from weightstore.adapters._pytorch_flax import (
    BurnToFlaxAdapter,
    FlaxToBurnAdapter,
    FlaxToPyTorchAdapter,
    PyTorchToFlaxAdapter,
)
from weightstore.base._record import ValueRecord
from weightstore.base._render import bounded_repr
from weightstore.errors import MAX_NAME_IN_MESSAGE, ModuleTypeNeededError
from weightstore.paths import PathFilter
from weightstore.snapshot import TensorSnapshot

__all__ = [
    "MODULE_TYPED_ADAPTERS",
    "Layout",
    "ModelConfig",
    "ModuleGuess",
    "ModuleTypeRule",
    "assign_module_types",
    "infer_module_types",
    "module_typed_adapters",
    "needs_module_types",
]

Layout = Literal["torch", "burn"]
"""Whose names and shapes a file follows (a Linear weight ``[out, in]`` or ``[in, out]``);
``None`` where either may."""

MODULE_TYPED_ADAPTERS: Final = (
    HalfPrecisionAdapter, PyTorchToBurnAdapter, BurnToPyTorchAdapter, PyTorchToFlaxAdapter,
    FlaxToPyTorchAdapter, BurnToFlaxAdapter, FlaxToBurnAdapter,
)  # fmt: skip
"""Adapters that decide by the owning module's type and change nothing without one."""

# The layout an adapter reads its input in; the first such adapter of a chain decides.
_SOURCE_LAYOUT: Final[Mapping[type[Adapter], Layout]] = {
    PyTorchToBurnAdapter: "torch", PyTorchToFlaxAdapter: "torch",
    BurnToPyTorchAdapter: "burn", BurnToFlaxAdapter: "burn",
}  # fmt: skip
_CONV_BY_RANK: Final = {3: "Conv1d", 4: "Conv2d", 5: "Conv3d"}
_BATCH_NORM_LEAVES: Final = frozenset(
    {"weight", "bias", "gamma", "beta", "running_mean", "running_var", "num_batches_tracked"}
)
_BURN_NORM_LEAVES: Final = frozenset({"gamma", "beta"})
_PLAIN_LEAVES: Final = frozenset({"weight", "bias"})
_LINEAR_OR_EMBEDDING: Final = ("Linear", "Embedding")
_SHOWN: Final = 3  # tensors named after the first in a refusal
_NAME_IT: Final = "assign_module_types(snapshots, adapter, {'PATTERN': 'TYPE'})"


class ModuleGuess(ValueRecord):
    """What a tensor's names and shapes say about the module owning it.

    Attributes:
        candidates: the module types it may be: one when known, several when ambiguous, none
            when no rule applies.
        why: what the rule saw, for a refusal (``"a 2-D weight with no bias"``).
        misfit: set when the tensors fit the other framework's layout only: what was seen
            (``"weight [7, 5] with bias [5]"``).
    """

    candidates: tuple[str, ...]
    why: str = ""
    misfit: str | None = None

    @property
    def module_type(self) -> str | None:
        """The one type inferred, or None when there is none or several."""
        return self.candidates[0] if len(self.candidates) == 1 else None


class ModuleTypeRule(ValueRecord):
    """Tensors whose name `pattern` matches are owned by a `module_type` module, whatever the
    inference says (``--module-type PATTERN=TYPE`` on the command line).

    Attributes:
        pattern: the names it applies to.
        module_type: a torch or Burn class name (``"Embedding"``), or any other name for
            "none of these".
    """

    pattern: PathFilter
    module_type: str

    @classmethod
    def from_regex(cls, regex: str, module_type: str) -> ModuleTypeRule:
        """The rule for names in which `regex` is found (unanchored, as `PathFilter`'s).

        Raises:
            InvalidOptionError: `regex` does not compile.
        """
        return cls(PathFilter().with_regex(regex), module_type)


def infer_module_types(
    tensors: Mapping[str, Sequence[int]] | Iterable[TensorSnapshot],
    layout: Layout | None = None,
    *,
    config: ModelConfig | None = None,
) -> dict[str, ModuleGuess]:
    """The owning module of every tensor, by the rules of the module doc.

    Args:
        tensors: names -> shapes, or snapshots (their names and shapes; nothing is read).
        layout: the framework whose layout the tensors follow, which tells a Linear from a
            misfit; None accepts either.
        config: the model's ``config.json`` (`ModelConfig.beside`), when there is one.

    Returns:
        name -> `ModuleGuess`, for every tensor given.
    """
    shapes = _shapes(tensors)
    groups: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, shape in shapes.items():
        prefix, _, leaf = name.rpartition(".")
        groups.setdefault(prefix, {})[leaf] = shape
    by_shape = {prefix: _group_guess(leaves, layout) for prefix, leaves in groups.items()}
    by_name = _by_known_names(groups, by_shape, layout, config)
    guesses: dict[str, ModuleGuess] = {}
    for prefix, leaves in groups.items():
        guess = by_name.get(prefix, by_shape[prefix])
        for leaf in leaves:
            guesses[f"{prefix}.{leaf}" if prefix else leaf] = guess
    return guesses


def assign_module_types(
    snapshots: Iterable[TensorSnapshot],
    adapter: Adapter,
    rules: Mapping[str, str] | Iterable[ModuleTypeRule] = (),
    *,
    layout: Layout | None = None,
    config: ModelConfig | None = None,
) -> list[TensorSnapshot]:
    """`snapshots` with their owning module's type, for saving them through `adapter`.

    A snapshot that names its module (a `container`, as a torch model's do) keeps it unless a
    rule matches; the others get a rule's type (the last rule that matches), else the inferred
    one (`infer_module_types`, in the layout `adapter` reads: torch's for
    `PyTorchToBurnAdapter`); an ambiguous owner takes its first candidate when `adapter` treats
    all candidates alike. A snapshot no rule types keeps an empty container.

    Args:
        snapshots: the tensors, in the order they are saved.
        adapter: the to-adapter they are saved through.
        rules: regex -> module type (``{"^emb": "Embedding"}``), or `ModuleTypeRule`s.
        layout: the layout to infer in, when not the one `adapter` reads.
        config: the model's ``config.json`` (`ModelConfig.beside`), which settles GPT-2's
            Conv1D layers and a model's head by name.

    Raises:
        ModuleTypeNeededError: an ambiguous owner that `adapter` treats differently per
            candidate, or a Linear laid out the other way than `adapter` expects; in either
            case unless a rule names the type. The message names the first tensor and how
            many more there are.
        InvalidOptionError: a rule's regex does not compile.

    Example:
        >>> typed = assign_module_types(store.get_all_snapshots().values(),  # doctest: +SKIP
        ...                             PyTorchToBurnAdapter(), {"^emb": "Embedding"})
        >>> save_into(typed, BurnpackStore.from_file("m").with_to_adapter(PyTorchToBurnAdapter()))
    """
    snapshots = list(snapshots)
    typed_rules = _rules(rules)
    if layout is None:
        layout = _layout_of(adapter)
    guesses = infer_module_types(snapshots, layout, config=config)
    assigned: list[TensorSnapshot] = []
    unclear: list[tuple[str, ModuleGuess]] = []
    misfits: list[tuple[str, ModuleGuess]] = []
    for snapshot in snapshots:
        name = snapshot.full_path
        chosen = [rule.module_type for rule in typed_rules if rule.pattern.matches(name)]
        if chosen:
            assigned.append(_typed(snapshot, chosen[-1]))
            continue
        if snapshot.container:
            assigned.append(snapshot)
            continue
        guess = guesses[name]
        if len(guess.candidates) > 1 and not _alike(snapshot, guess.candidates, adapter):
            unclear.append((name, guess))
        if guess.misfit is not None:
            misfits.append((name, guess))
        assigned.append(snapshot.replace(container=guess.candidates[:1]))
    if misfits:
        raise _misfit_error(misfits, adapter)
    if unclear:
        raise _unclear_error(unclear, adapter)
    return assigned


def needs_module_types(adapter: Adapter) -> bool:
    """Whether `adapter` (or an adapter it chains) decides by module type, so that it changes
    nothing on tensors whose module is unknown (`MODULE_TYPED_ADAPTERS`)."""
    return next(module_typed_adapters(adapter), None) is not None


def module_typed_adapters(adapter: Adapter) -> Iterator[Adapter]:
    """The adapters in `adapter` that decide by module type, looking through chains, in the
    order they run."""
    if isinstance(adapter, ChainAdapter):
        yield from module_typed_adapters(adapter.first)
        yield from module_typed_adapters(adapter.second)
    elif isinstance(adapter, MODULE_TYPED_ADAPTERS):
        yield adapter


# -- inference ----------------------------------------------------------------------------------


def _shapes(
    tensors: Mapping[str, Sequence[int]] | Iterable[TensorSnapshot],
) -> dict[str, tuple[int, ...]]:
    if isinstance(tensors, Mapping):
        return {name: tuple(shape) for name, shape in tensors.items()}
    return {snapshot.full_path: tuple(snapshot.shape) for snapshot in tensors}


def _group_guess(leaves: Mapping[str, tuple[int, ...]], layout: Layout | None) -> ModuleGuess:
    names = set(leaves)
    if names & {"running_mean", "running_var"} and names <= _BATCH_NORM_LEAVES:
        return ModuleGuess(("BatchNorm",))
    if "gamma" in names and names <= _BURN_NORM_LEAVES:
        return ModuleGuess(("LayerNorm",))
    weight = leaves.get("weight")
    if weight is None or not names <= _PLAIN_LEAVES:
        return ModuleGuess(())
    bias = leaves.get("bias")
    if len(weight) in _CONV_BY_RANK:
        return ModuleGuess((_CONV_BY_RANK[len(weight)],))
    if len(weight) == 2:
        if bias is None:
            return ModuleGuess(("Linear", "Embedding"), "a 2-D weight with no bias")
        if _linear_bias(weight, bias, layout):
            return ModuleGuess(("Linear",))
        if _linear_bias(weight, bias, None):  # fits the other layout only
            return ModuleGuess((), misfit=f"weight {list(weight)} with bias {list(bias)}")
        return ModuleGuess(())
    if len(weight) == 1:
        if bias is None:
            return ModuleGuess(("RmsNorm", "PRelu"), "a 1-D weight with no bias")
        return ModuleGuess(("LayerNorm",)) if bias == weight else ModuleGuess(())
    return ModuleGuess(())


def _by_known_names(
    groups: Mapping[str, Mapping[str, tuple[int, ...]]],
    by_shape: Mapping[str, ModuleGuess],
    layout: Layout | None,
    config: ModelConfig | None,
) -> dict[str, ModuleGuess]:
    """Module prefix -> the guess its name settles (`_known_models`), where it differs from
    the shapes' one."""
    settled: dict[str, ModuleGuess] = {}
    for prefix, guess in by_shape.items():
        if guess.candidates != _LINEAR_OR_EMBEDDING:
            continue
        module = prefix.rpartition(".")[2]
        if EMBEDDING_MODULE.fullmatch(module):
            settled[prefix] = ModuleGuess(("Embedding",))
        elif module in HEAD_MODULES and config is not None:
            settled[prefix] = ModuleGuess(("Linear",))
    if layout != "burn":  # Burn has no Conv1D: a Burn file holds them as Linears
        settled.update(_conv1d_guesses(groups, config))
    return settled


def _conv1d_guesses(
    groups: Mapping[str, Mapping[str, tuple[int, ...]]], config: ModelConfig | None
) -> dict[str, ModuleGuess]:
    """The weight-and-bias modules named as GPT-2's Conv1D layers that are Conv1D: those not
    laid out ``[out, in]`` when `config` says a Conv1D family; none when it names another;
    else those when every non-square one is ``[in, out]``, squares ambiguous without that."""
    fits: dict[str, str] = {}
    for prefix, leaves in groups.items():
        if prefix.rpartition(".")[2] in CONV1D_MODULES and set(leaves) == _PLAIN_LEAVES:
            fit = _dense_fit(leaves["weight"], leaves["bias"])
            if fit is not None:
                fits[prefix] = fit
    conv1d = {p: ModuleGuess(("Conv1D",)) for p, fit in fits.items() if fit != "linear"}
    if config is not None and config.names_model:
        return conv1d if config.uses_conv1d else {}
    evidence = {fit for fit in fits.values() if fit != "square"}
    if evidence == {"conv1d"}:
        return conv1d
    if evidence == {"linear"}:
        return {}
    why = "a square weight named like transformers' Conv1D, and no config.json or layer to tell"
    return {p: ModuleGuess(("Linear", "Conv1D"), why) for p, fit in fits.items() if fit == "square"}


def _dense_fit(weight: tuple[int, ...], bias: tuple[int, ...]) -> str | None:
    """How a 2-D `weight` and its `bias` lie: ``"linear"`` (``[out, in]``), ``"conv1d"``
    (``[in, out]``), ``"square"`` (either), None (neither)."""
    if len(weight) != 2 or len(bias) != 1:
        return None
    rows, cols = weight
    if bias[0] == rows:
        return "square" if bias[0] == cols else "linear"
    return "conv1d" if bias[0] == cols else None


def _linear_bias(weight: tuple[int, ...], bias: tuple[int, ...], layout: Layout | None) -> bool:
    """Whether `bias` has the output size of a Linear `weight` laid out as `layout` says."""
    outputs = {"torch": {weight[0]}, "burn": {weight[1]}, None: set(weight)}[layout]
    return len(bias) == 1 and bias[0] in outputs


def _layout_of(adapter: Adapter) -> Layout | None:
    """The layout the first layout-changing adapter of `adapter` reads, or None."""
    for typed in module_typed_adapters(adapter):
        layout = _SOURCE_LAYOUT.get(type(typed))
        if layout is not None:
            return layout
    return None


def _rules(rules: Mapping[str, str] | Iterable[ModuleTypeRule]) -> list[ModuleTypeRule]:
    if isinstance(rules, Mapping):
        return [ModuleTypeRule.from_regex(regex, kind) for regex, kind in rules.items()]
    return list(rules)


def _typed(snapshot: TensorSnapshot, module_type: str) -> TensorSnapshot:
    """`snapshot` owned by a `module_type` module: the last entry of its container."""
    return snapshot.replace(container=(*snapshot.container[:-1], module_type))


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


# -- refusals -----------------------------------------------------------------------------------


def _name(name: str) -> str:
    return bounded_repr(name, limit=MAX_NAME_IN_MESSAGE)


def _more(found: Sequence[tuple[str, ModuleGuess]]) -> str:
    """`` (2 more: 'a', 'b')`` for the entries after the first, or nothing."""
    more = len(found) - 1
    if not more:
        return ""
    others = ", ".join(_name(name) for name, _ in found[1 : 1 + _SHOWN])
    return f" ({more:,} more: {others}{', ...' if more > _SHOWN else ''})"


def _asked_by(adapter: Adapter) -> str:
    """The module-typed adapters in `adapter` by class name: ``PyTorchToBurnAdapter``."""
    names = dict.fromkeys(type(typed).__name__ for typed in module_typed_adapters(adapter))
    return " with ".join(names) or type(adapter).__name__


def _unclear_error(
    unclear: Sequence[tuple[str, ModuleGuess]], adapter: Adapter
) -> ModuleTypeNeededError:
    name, guess = unclear[0]
    subject = f"{_name(name)} ({guess.why}: {' or '.join(guess.candidates)})"
    others = _more(unclear)
    detail = (
        f"cannot tell which module owns {subject}, and {_asked_by(adapter)} treats them "
        f"differently; name it with {_NAME_IT} and save what it returns{others}"
    )
    return ModuleTypeNeededError(
        detail, tensors=tuple(n for n, _ in unclear), candidates=guess.candidates,
        misfit=False, subject=subject, others=others,
    )  # fmt: skip


def _misfit_error(
    misfits: Sequence[tuple[str, ModuleGuess]], adapter: Adapter
) -> ModuleTypeNeededError:
    name, guess = misfits[0]
    subject = f"{_name(name)} ({guess.misfit})"
    others = _more(misfits)
    detail = (
        f"{subject} is a Linear laid out the other way than {_asked_by(adapter)} expects; is "
        f"the file already converted? ({_NAME_IT} names the type to override){others}"
    )
    return ModuleTypeNeededError(
        detail, tensors=tuple(n for n, _ in misfits), candidates=(), misfit=True,
        subject=subject, others=others,
    )  # fmt: skip
