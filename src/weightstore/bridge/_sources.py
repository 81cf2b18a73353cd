"""Sources that are no model: what a save can read besides a torch module or a dict of arrays.

Each kind becomes a `ModelFreeSource` (a `TensorSource`): lazy snapshots in the source's
order, the ties between names, and the framework the tensors come from. Nothing is read when
the source is built; each tensor is read when the writer gets to it, and dropped before the
next, so converting a file larger than memory holds one tensor at a time.

    a store         anything with ``get_all_snapshots()``: its names after its own remapping,
                    index mapping and top-level key, sorted (its filter and from-adapter are
                    load options and do not apply). Framework: ``pt`` for a PyTorch
                    checkpoint, else the file's own ``format`` pair when it names one.
    a reader        ``names_in_file_order``, ``descriptor``, ``get`` (`TensorReader`): file
                    order. Framework as for a store.
    snapshots       an iterable of `TensorSnapshot`s, as given. Framework unknown.
    a state dict    a mapping whose leaves are snapshots, torch tensors or NumPy arrays (nested
                    mappings joined with dots), as given. Framework ``pt`` when a torch tensor
                    is in it. A mapping of NumPy arrays alone stays a model (`NumpyDictBridge`).

Module types: none of these names the modules that own its tensors, so each snapshot without
one (a snapshot the caller built keeps its own) is typed from the names and shapes, as
``weightstore convert`` types a file's (`weightstore.adapters.infer_module_types`): ``fc.weight``
beside a bias of its output size is a Linear's, an ambiguous owner takes its first candidate,
and a tensor no rule types keeps an empty container. Adapters keyed on module types (the Burn
and Flax layouts, half precision) then act on them; where one would act on a guess (an owner
that may be a Linear or an Embedding, which the adapter treats differently, or a Linear laid
out the other way), `validate_adapter` refuses the save (`ModuleTypeNeededError`), and the
caller names the types with `assign_module_types`. torch is imported only when a torch tensor
is seen, never to look for one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from weightstore.adapters import Adapter, assign_module_types, infer_module_types
from weightstore.adapters._inference import module_typed_adapters
from weightstore.base._record import ValueRecord
from weightstore.bridge._model import TensorSource, aliases_by_key, is_torch_tensor
from weightstore.errors import InvalidOptionError
from weightstore.snapshot import TensorSnapshot, reader_snapshots

__all__ = [
    "FRAMEWORKS",
    "ModelFreeSource",
    "is_array_tree",
    "model_free_source",
    "validate_adapter",
]

FRAMEWORKS: Final = frozenset({"pt", "tf", "flax", "mlx"})
"""SafeTensors ``format`` values that name a framework: those transformers accepts (older
versions refuse a file whose ``format`` is anything else). A source file's own pair is carried
over only when it is one of these."""

_NO_TIES: Final[Mapping[str, str]] = MappingProxyType({})  # a default shared read-only

_PYTORCH_FRAMEWORK: Final = "pt"  # a PyTorch checkpoint's tensors, read with torch or without


class ModelFreeSource(ValueRecord):
    """Tensors to save that come from no model; a `TensorSource`.

    Attributes:
        items: the snapshots, in the order they are written.
        framework: the framework the tensors come from (``"pt"``), or None when unknown.
        ties: later names -> first name, for names holding one tensor.
    """

    items: tuple[TensorSnapshot, ...]
    framework: str | None = None
    ties: Mapping[str, str] = _NO_TIES

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for snapshot in self.items:  # a name given twice would keep one tensor, silently
            if snapshot.full_path in seen:
                raise InvalidOptionError(
                    f"the source names two tensors {snapshot.full_path!r}; names must be unique"
                )
            seen.add(snapshot.full_path)

    @property
    def module_types(self) -> bool:
        """True: each snapshot names its owning module, as the caller built it or as its names
        and shapes show it (`snapshots`); `validate_adapter` checks that the adapter asked for
        acts on no guess."""
        return True

    def aliases(self) -> dict[str, str]:
        """The ties, later name -> first name."""
        return dict(self.ties)

    def snapshots(self) -> list[TensorSnapshot]:
        """The snapshots, unread; those without a container typed from names and shapes."""
        if all(snapshot.container for snapshot in self.items):
            return list(self.items)
        guesses = infer_module_types(self.items)
        return [
            snapshot if snapshot.container
            else snapshot.replace(container=guesses[snapshot.full_path].candidates[:1])
            for snapshot in self.items
        ]  # fmt: skip


def model_free_source(source: object) -> ModelFreeSource | None:
    """`source` as a source to save from, or None when it is none of the kinds above.

    Raises:
        InvalidOptionError: `source` is one of the kinds but holds something that is not a
            tensor (a mapping entry, an item of an iterable), a key that is not a string, or
            one name twice (``{"a.b": x, "a": {"b": y}}``, or two snapshots named alike).
    """
    for recognises, build in _KINDS:
        if recognises(source):
            return build(source)
    return None


def is_array_tree(source: object) -> bool:
    """True for a (nested) mapping whose leaves are all NumPy arrays or scalars: a model for
    `NumpyDictBridge`, loadable in place, rather than a source."""
    if not isinstance(source, Mapping):
        return False
    return all(isinstance(value, np.ndarray | np.generic) for _, value in _leaves(source, ""))


def validate_adapter(adapter: Adapter, source: TensorSource) -> None:
    """Refuse an adapter that keys on module types for a source whose types it cannot trust.

    A model-free source types its snapshots from names and shapes (`ModelFreeSource.snapshots`);
    the adapter is refused where it would act on a guess, as ``weightstore convert`` refuses
    it. A model that names no modules (a dict of NumPy arrays) is refused outright.

    Raises:
        ModuleTypeNeededError: a model-free source holds an owner `adapter` cannot settle (an
            ambiguous one it treats differently per candidate, or a Linear laid out the other
            way); ``option`` is ``"module_type"``.
        InvalidOptionError: `adapter` is (or chains) one of the module-typed adapters and the
            model names no module types; ``option`` is ``"to_adapter"``.
    """
    typed = next(module_typed_adapters(adapter), None)
    if typed is None:
        return
    if isinstance(source, ModelFreeSource):
        assign_module_types(source.items, adapter)  # raises where it would type by a guess
        return
    if source.module_types:
        return
    raise InvalidOptionError(
        f"{type(typed).__name__} decides by module type (Linear, the norm layers), and the "
        "tensors being saved name no modules (a dict of NumPy arrays does not), so it would "
        "change nothing; save from the model, or the arrays as a list of TensorSnapshots (their "
        "module types are then read from names and shapes), or use FloatCastAdapter for a "
        "dtype cast",
        option="to_adapter",
    )


# -- the kinds, in the order they are tried ---------------------------------------------------


def _is_store(source: object) -> bool:
    return callable(getattr(source, "get_all_snapshots", None))


def _from_store(store: Any) -> ModelFreeSource:
    snapshots: Mapping[str, TensorSnapshot] = store.get_all_snapshots()
    native = getattr(getattr(store, "FORMAT", None), "native_framework", None)
    if native is not None:  # a PyTorch checkpoint's tensors are torch's, whatever it says
        framework: str | None = native
    else:
        framework = _declared_framework(store.read_metadata())
    return ModelFreeSource(tuple(snapshots.values()), framework)


def _is_reader(source: object) -> bool:
    return all(
        callable(getattr(source, name, None))
        for name in ("names_in_file_order", "descriptor", "get")
    )


def _from_reader(reader: Any) -> ModelFreeSource:
    snapshots = reader_snapshots(reader)
    if _is_pytorch_reader(reader):
        framework: str | None = _PYTORCH_FRAMEWORK
    else:
        framework = _declared_framework(reader.metadata())
    return ModelFreeSource(tuple(snapshots), framework)


def _from_mapping(mapping: Mapping[Any, Any]) -> ModelFreeSource:
    snapshots, keys = [], []
    torch_seen = False
    for path, value in _leaves(mapping, ""):
        snapshot, key = _leaf_snapshot(path, value)
        snapshots.append(snapshot)
        torch_seen = torch_seen or is_torch_tensor(value)
        if key is not None:
            keys.append((path, key))
    framework = _PYTORCH_FRAMEWORK if torch_seen else None
    return ModelFreeSource(tuple(snapshots), framework, aliases_by_key(keys))


def _is_snapshot_iterable(source: object) -> bool:
    return isinstance(source, Iterable) and not isinstance(source, str | bytes | bytearray)


def _from_iterable(items: Iterable[Any]) -> ModelFreeSource:
    snapshots = []
    for position, item in enumerate(items):
        if not isinstance(item, TensorSnapshot):
            raise InvalidOptionError(
                f"item {position} of the source is {type(item).__name__}, not a TensorSnapshot"
            )
        snapshots.append(item)
    return ModelFreeSource(tuple(snapshots))


_KINDS: Final[tuple[tuple[Callable[[object], bool], Callable[[Any], ModelFreeSource]], ...]] = (
    (_is_store, _from_store),
    (_is_reader, _from_reader),
    (lambda source: isinstance(source, Mapping), _from_mapping),
    (_is_snapshot_iterable, _from_iterable),
)


# -- helpers ----------------------------------------------------------------------------------


def _is_pytorch_reader(reader: object) -> bool:
    """True for the PyTorch checkpoint reader, checked without loading its package."""
    package = "weightstore.pytorch_reader."
    return any(cls.__module__.startswith(package) for cls in type(reader).__mro__)


def _declared_framework(metadata: Mapping[str, object]) -> str | None:
    """The file's own ``format`` pair, when it names a framework (`FRAMEWORKS`)."""
    value = metadata.get("format")
    return value if isinstance(value, str) and value in FRAMEWORKS else None


def _leaves(mapping: Mapping[Any, Any], prefix: str) -> Iterator[tuple[str, object]]:
    """``(dotted path, value)`` for every non-mapping value, nested mappings joined with dots."""
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise InvalidOptionError(f"source keys must be strings, got {key!r}")
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _leaves(value, f"{path}.")
        else:
            yield path, value


def _leaf_snapshot(path: str, value: object) -> tuple[TensorSnapshot, Hashable | None]:
    """One mapping entry as a snapshot named `path`, and the key ties are found by (None for
    scalars, which are values, never ties)."""
    if isinstance(value, TensorSnapshot):
        return (value if value.full_path == path else value.with_name(path)), id(value)
    if isinstance(value, np.ndarray):
        return TensorSnapshot.from_array(path, value), id(value)
    if isinstance(value, np.generic):
        return TensorSnapshot.from_array(path, np.asarray(value)), None
    if is_torch_tensor(value):
        from weightstore.bridge._torch import tensor_key, tensor_snapshot

        return tensor_snapshot(path, value), tensor_key(value)  # type: ignore[arg-type]
    raise InvalidOptionError(
        f"source entry {path!r} is {type(value).__name__}, not a TensorSnapshot, a NumPy array "
        "or a torch tensor"
    )
