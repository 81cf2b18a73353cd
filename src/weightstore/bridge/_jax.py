"""JAX and Flax models: the only module in weightstore that imports jax (and flax).

Three kinds of model, one bridge:

    NNX module      ``nnx.state(model)`` without its RNG state, flattened: ``fc1.kernel``,
                    ``layers.0.bias``. Loads in place: each Variable is given its new array
                    (``nnx.update(variable, array)``) as soon as it is read, so the old array
                    is released at once. An abstract model (``nnx.eval_shape``) holds
                    ``jax.ShapeDtypeStruct`` leaves and is materialised from the store.
    pytree          a Linen variable dict (``params.Dense_0.kernel``, ``batch_stats...``) or
                    any pytree of arrays (or of ``ShapeDtypeStruct``s, from ``jax.eval_shape``);
                    names join the key path with dots. JAX arrays are immutable, so a load
                    builds new leaves: in a `TreeSlot` a new tree (`weightstore.bridge.load_tree`),
                    in a plain tree of dicts and lists, written into those containers in place.

Container types, which filters see and adapters key on, start with the variable type (NNX's
``Param``, ``BatchStat``; Linen's collections as those types: ``params`` -> ``Param``), then
the module types from the root: ``Param.MLP.Linear``. The owning module comes last, as for
torch. Linen trees name no classes, so a module's type is read from its auto-name
(``Dense_0`` -> ``Dense``) or, for a module named by hand, from its variables (`_inferred`).

Where loaded arrays go (`device`, see `JaxBridge`): a sharding per leaf, from one sharding, a
pytree of shardings, or a rule; by default each leaf's own. A single-device leaf is one
``jax.device_put`` of the array the store returns; on the CPU that aliases the store's memory
whenever it is 64-byte aligned, which burnpack's 256-byte alignment gives every tensor of a
mapped file, so such a load copies nothing. A leaf split over devices is built with
``jax.make_array_from_callback``: each addressable device's callback reads only its slice,
through the container reader's ``get_slice`` when the tensor comes straight from a file
(`_part_reader`), and each distinct slice once (replicas ask for the same one).
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import jax
import numpy as np

from weightstore.adapters._pytorch_flax import LINEN_COLLECTIONS
from weightstore.bridge._model import READ_ERRORS, TreeSlot
from weightstore.dtypes import DType, from_numpy
from weightstore.errors import DTypeError, InvalidOptionError
from weightstore.snapshot import TensorSnapshot, part_reader
from weightstore.transfer._plan import LoadOutcome, LoadPlan, PendingTensor, Target

__all__ = ["FLAX_FRAMEWORK", "JaxBridge", "is_jax_model"]

FLAX_FRAMEWORK: Final = "flax"  # SafeTensors' ``format`` metadata for Flax weights

_AUTO_NAME: Final = re.compile(r"([A-Z][A-Za-z0-9]*)_\d+")  # Linen's ``Dense_0``
_UNKNOWN_MODULE: Final = "Module"

Sharding = jax.sharding.Sharding


def is_jax_model(model: object) -> bool:
    """True for a Flax NNX module, or a tree of mappings, lists and tuples (what JAX flattens
    without a registration: Linen variables, FrozenDicts, NNX States) with a JAX array or
    ShapeDtypeStruct leaf. Any other object is left alone: a save asks this of every source
    (stores, readers, iterators of snapshots), and JAX's own flattening warns on iterables it
    does not know. A registered pytree of another kind loads through a `TreeSlot`."""
    if _is_nnx_module(model):
        return True
    return not _is_jax_leaf(model) and _holds_jax_leaf(model)  # a bare array names no tensor


def _holds_jax_leaf(node: object) -> bool:
    if _is_jax_leaf(node):
        return True
    if isinstance(node, Mapping):
        return any(_holds_jax_leaf(child) for child in node.values())
    if isinstance(node, list | tuple):
        return any(_holds_jax_leaf(child) for child in node)
    return False


def _is_jax_leaf(value: object) -> bool:
    return isinstance(value, jax.Array | jax.ShapeDtypeStruct)


def _is_nnx_module(model: object) -> bool:
    """Checked without importing flax: no NNX module exists before flax.nnx is imported."""
    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(model, nnx.Module)


class _Leaf:
    """One array slot of the model: its dotted path, how to reach it, what it holds."""

    __slots__ = ("container", "keys", "path", "value", "variable")

    def __init__(
        self, path: str, keys: tuple[Any, ...], container: tuple[str, ...], value: Any,
        variable: Any = None,
    ) -> None:  # fmt: skip
        self.path, self.keys, self.container = path, keys, container
        self.value, self.variable = value, variable

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def dtype(self) -> DType:
        try:
            return from_numpy(np.dtype(self.value.dtype))
        except (TypeError, DTypeError) as err:
            raise InvalidOptionError(
                f"model leaf {self.path!r} has dtype {self.value.dtype}, which no tensor file "
                "holds (a PRNG key? store jax.random.key_data(key) instead)"
            ) from err


class JaxBridge:
    """Reads and writes a JAX model's arrays; a `ModelBridge` (see the module docstring).

    Args:
        model: an NNX module, a pytree of arrays, or a `TreeSlot` holding either.
        device: where loaded arrays go: None (each leaf's own sharding, a concrete leaf's
            where it is; the default device for an abstract leaf without one), a
            ``jax.Device`` or a ``Sharding`` for every leaf, a pytree of shardings shaped
            like the model (leaves it lacks keep their own), or a rule
            ``(path, shape) -> Sharding | Device | None``.

    Raises:
        InvalidOptionError: a leaf is no array, two leaves share a dotted name, or `device`
            is none of the above (or a rule returns something else).
    """

    def __init__(self, model: object, device: Any = None) -> None:
        self._slot = model if isinstance(model, TreeSlot) else None
        self._model = model.tree if isinstance(model, TreeSlot) else model
        self._treedef: Any = None
        if _is_nnx_module(self._model):
            leaves = _nnx_leaves(self._model)
        else:
            leaves, self._treedef = _tree_leaves(self._model)
        self._leaves = {leaf.path: leaf for leaf in leaves}
        self._shardings = _placements(device, leaves)

    @property
    def framework(self) -> str:
        """``"flax"``, as transformers writes Flax checkpoints' ``format``."""
        return FLAX_FRAMEWORK

    @property
    def module_types(self) -> bool:
        """True: containers name the variable type and the module types (NNX's classes,
        Linen's read from names and variables)."""
        return True

    def targets(self) -> list[Target]:
        """Every array leaf, in the model's flattening order.

        Raises:
            InvalidOptionError: a plain tree (no `TreeSlot`) holds a leaf inside a container
                that cannot change in place (a tuple, a FrozenDict), so a load could not
                write it; or a leaf's dtype is no tensor dtype.
        """
        if self._treedef is not None and self._slot is None:
            for leaf in self._leaves.values():
                _check_writable(self._model, leaf)
        return [
            Target(leaf.path, leaf.container, leaf.dtype(), leaf.shape)
            for leaf in self._leaves.values()
        ]

    def aliases(self) -> dict[str, str]:
        """None: an NNX module lists a shared Variable once, and pytree leaves are values."""
        return {}

    def snapshots(self) -> list[TensorSnapshot]:
        """Snapshots of every leaf, each read to host memory when asked (a view on the CPU)."""
        return [_snapshot(leaf) for leaf in self._leaves.values()]

    def load(self, plan: LoadPlan) -> LoadOutcome:
        """Build each planned array where its sharding says and put it in the model; a
        pytree's new tree is built at the end. `plan.spare` is ignored (no load hooks)."""
        outcome = LoadOutcome()
        built: dict[str, jax.Array] = {}
        for path, pending in plan.tensors.items():
            leaf = self._leaves[path]
            try:
                array = _materialise(pending, leaf.shape, self._shardings[path])
            except READ_ERRORS as err:
                outcome.errors[path] = str(err)
                continue
            if leaf.variable is not None:
                _update_variable(leaf.variable, array)
            else:
                built[path] = array
            outcome.loaded.add(path)
        if built:
            self._write_tree(built)
        return outcome

    def _write_tree(self, built: dict[str, jax.Array]) -> None:
        """The loaded leaves into the tree: a new tree in the slot, else in place."""
        if self._slot is None:
            for path, array in built.items():
                _set_leaf(self._model, self._leaves[path].keys, array)
            return
        leaves = [built.get(path, leaf.value) for path, leaf in self._leaves.items()]
        self._slot.tree = jax.tree_util.tree_unflatten(self._treedef, leaves)


# -- walking models -------------------------------------------------------------------------


def _nnx_leaves(model: Any) -> list[_Leaf]:
    """The module's Variables holding arrays, in `nnx.state`'s order, RNG state left out (a
    checkpoint holds weights; NNX keeps keys and counters as Variables too). One walk of the
    graph finds both the Variables and the module types (half the cost of ``nnx.state`` and
    ``nnx.iter_modules``, which walk it twice); a shared Variable is met once, at its first
    path, as ``nnx.state`` lists it."""
    from flax import nnx

    types: dict[tuple[Any, ...], str] = {}
    variables = []
    for keys, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Module):
            types[keys] = type(node).__name__
        elif isinstance(node, nnx.Variable) and not isinstance(node, nnx.RngState):
            variables.append((keys, node))
    leaves = []
    for keys, variable in variables:
        value = variable.get_value()
        if not _is_array(value):
            continue  # a Variable holding None or a Python value holds no tensor
        owners = (types[keys[:depth]] for depth in range(len(keys)) if keys[:depth] in types)
        container = (type(variable).__name__, *owners)
        leaves.append(_Leaf(".".join(map(str, keys)), keys, container, value, variable))
    return leaves


def _tree_leaves(tree: object) -> tuple[list[_Leaf], Any]:
    """The pytree's leaves, named by their key paths, and its structure."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    named = [(tuple(_segment(key) for key in keys), keys, value) for keys, value in flat]
    collections = isinstance(tree, Mapping) and "params" in tree  # a Linen variable dict
    owners = _owner_variables(named, collections)
    leaves: list[_Leaf] = []
    seen: set[str] = set()
    for segments, keys, value in named:
        path = ".".join(segments)
        if not segments:
            raise InvalidOptionError("a single array has no name; put it in a dict")
        if not _is_array(value):
            raise InvalidOptionError(f"model leaf {path!r} is {type(value).__name__}, not an array")
        if path in seen:
            raise InvalidOptionError(f"the model names two leaves {path!r}; names must be unique")
        seen.add(path)
        container = _tree_container(segments, collections, owners)
        leaves.append(_Leaf(path, keys, container, value))
    return leaves, treedef


def _is_array(value: object) -> bool:
    return isinstance(value, jax.Array | jax.ShapeDtypeStruct | np.ndarray | np.generic)


def _segment(key: Any) -> str:
    """One key of a JAX key path as a name segment."""
    for attribute in ("key", "idx", "name"):  # DictKey / FlattenedIndexKey, SequenceKey, GetAttrKey
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _owner_variables(
    named: list[tuple[tuple[str, ...], Any, Any]], collections: bool
) -> dict[tuple[str, ...], dict[str, int]]:
    """Each owning module's variables across collections: leaf name -> number of dims."""
    owners: dict[tuple[str, ...], dict[str, int]] = {}
    for segments, _, value in named:
        module = segments[1:-1] if collections else segments[:-1]
        if segments:
            owners.setdefault(module, {})[segments[-1]] = len(getattr(value, "shape", ()))
    return owners


def _tree_container(
    segments: tuple[str, ...], collections: bool, owners: dict[tuple[str, ...], dict[str, int]]
) -> tuple[str, ...]:
    """The variable type (from the collection) and the module types down to the owner."""
    head: tuple[str, ...] = ()
    modules = segments[:-1]
    if collections:
        head = (LINEN_COLLECTIONS.get(segments[0], segments[0]),)
        modules = segments[1:-1]
    types = []
    for depth, name in enumerate(modules):
        auto = _AUTO_NAME.fullmatch(name)
        if auto is not None:
            types.append(auto.group(1))
        elif depth == len(modules) - 1:
            types.append(_inferred(owners.get(modules, {})) or _UNKNOWN_MODULE)
        else:
            types.append(_UNKNOWN_MODULE)
    return (*head, *types)


def _inferred(variables: Mapping[str, int]) -> str | None:
    """A Linen module's type from its variables, for a module named by hand (``fc1``):
    running statistics make a BatchNorm, a kernel a Dense (2-D) or a Conv, an embedding
    table an Embed, a lone scale a LayerNorm (RMSNorm and GroupNorm convert alike)."""
    if "mean" in variables and "var" in variables:
        return "BatchNorm"
    if "kernel" in variables:
        return "Dense" if variables["kernel"] == 2 else "Conv"
    if "embedding" in variables:
        return "Embed"
    if "scale" in variables:
        return "LayerNorm"
    return None


def _check_writable(tree: Any, leaf: _Leaf) -> None:
    """Refuse a leaf a load could not write into `tree` in place."""
    node, where = tree, []
    for key in leaf.keys:
        if not isinstance(node, dict | list):
            break
        node = node[_index(key)]
        where.append(_segment(key))
    else:
        return
    holder = ".".join(where) or "the root"
    raise InvalidOptionError(
        f"model leaf {leaf.path!r} sits in a {type(node).__name__} ({holder}), which cannot "
        "change in place; load with weightstore.bridge.load_tree, which returns a new tree"
    )


def _index(key: Any) -> Any:
    """The subscript a JAX key path entry stands for in a dict or a list."""
    return key.idx if hasattr(key, "idx") else key.key


def _set_leaf(tree: Any, keys: tuple[Any, ...], value: Any) -> None:
    node = tree
    for key in keys[:-1]:
        node = node[_index(key)]
    node[_index(keys[-1])] = value


def _update_variable(variable: Any, array: jax.Array) -> None:
    """``nnx.update`` on one Variable: its value replaced, its metadata kept."""
    from flax import nnx

    nnx.update(variable, array)


# -- saving ---------------------------------------------------------------------------------


def _snapshot(leaf: _Leaf) -> TensorSnapshot:
    read = functools.partial(_host_array, leaf.path, leaf.value)
    path = tuple(leaf.path.split("."))
    return TensorSnapshot(path, leaf.dtype(), leaf.shape, read, leaf.container)


def _host_array(path: str, value: Any) -> np.ndarray[Any, Any]:
    """A leaf's data in host memory: a view of a CPU array, a gathered copy otherwise."""
    if isinstance(value, jax.ShapeDtypeStruct):
        raise DTypeError(
            f"model leaf {path!r} is abstract (a ShapeDtypeStruct, as eval_shape leaves it) "
            "and has no data"
        )
    if isinstance(value, jax.Array) and not value.is_fully_addressable:
        raise InvalidOptionError(
            f"model leaf {path!r} spans devices of other processes; gather it "
            "(jax.experimental.multihost_utils.process_allgather) before saving"
        )
    return np.asarray(value)


# -- placing loaded arrays ------------------------------------------------------------------


def _placements(device: Any, leaves: Iterable[_Leaf]) -> dict[str, Sharding | None]:
    """Each leaf's sharding for a load (None: the default device), from `device`."""
    leaves = list(leaves)
    own = {leaf.path: _own_sharding(leaf.value) for leaf in leaves}
    if device is None:
        return own
    if isinstance(device, jax.Device | Sharding):
        everywhere = _as_sharding(device, "device")
        return dict.fromkeys(own, everywhere)
    if callable(device):
        ruled = {
            leaf.path: _as_sharding(device(leaf.path, leaf.shape), leaf.path) for leaf in leaves
        }
        return {path: own[path] if found is None else found for path, found in ruled.items()}
    given = _sharding_tree(device)
    unknown = sorted(set(given) - set(own))
    if unknown:
        raise InvalidOptionError(
            f"the sharding tree names {len(unknown)} path(s) the model lacks, first {unknown[0]!r}",
            option="device",
        )
    return {path: given.get(path, own[path]) for path in own}


def _own_sharding(value: Any) -> Sharding | None:
    """Where a leaf lives now: a committed or multi-device array's sharding, an abstract
    leaf's when it has one; None (the default device) for the rest."""
    if isinstance(value, jax.Array):
        sharding: Sharding = value.sharding
        return sharding if value.committed or len(sharding.device_set) > 1 else None
    if isinstance(value, jax.ShapeDtypeStruct):
        return value.sharding if isinstance(value.sharding, Sharding) else None
    return None


def _as_sharding(value: Any, where: str) -> Sharding | None:
    if value is None or isinstance(value, Sharding):
        return value
    if isinstance(value, jax.Device):
        return jax.sharding.SingleDeviceSharding(value)
    raise InvalidOptionError(
        f"the placement for {where!r} is {type(value).__name__}; expected a Sharding, a "
        "Device or None",
        option="device",
    )


def _sharding_tree(tree: Any) -> dict[str, Sharding]:
    """A pytree of shardings (nested dicts, an NNX State of them) by dotted path."""

    def is_leaf(node: Any) -> bool:
        return isinstance(node, Sharding | jax.Device) or _is_variable(node)

    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    if len(flat) == 1 and not flat[0][0]:  # no tree at all: a value of the wrong kind
        raise InvalidOptionError(
            f"device is {type(tree).__name__}; expected a jax.Device, a Sharding, a pytree of "
            "shardings shaped like the model, or a rule (path, shape) -> Sharding | None",
            option="device",
        )
    found: dict[str, Sharding] = {}
    for keys, value in flat:
        path = ".".join(_segment(key) for key in keys)
        value = value.get_value() if _is_variable(value) else value
        sharding = _as_sharding(value, path)
        if sharding is not None:
            found[path] = sharding
    return found


def _is_variable(node: object) -> bool:
    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(node, nnx.Variable)


# -- reading --------------------------------------------------------------------------------


def _materialise(
    pending: PendingTensor, shape: tuple[int, ...], sharding: Sharding | None
) -> jax.Array:
    """One loaded array, placed by `sharding`.

    On one device: ``jax.device_put`` of the array read, which on the CPU aliases it when
    64-byte aligned (JAX never writes into it: a donated aliased buffer is copied first).
    Over several: each addressable device's slice read on its own (`_PartReader`).
    """
    array: jax.Array
    if sharding is None:
        array = jax.device_put(pending.read())
    elif len(sharding.device_set) == 1:
        array = jax.device_put(pending.read(), sharding)
    else:
        array = jax.make_array_from_callback(shape, sharding, _PartReader(pending, shape))
    return array


class _PartReader:
    """``make_array_from_callback``'s callback for one tensor: the part one device holds,
    each distinct part read once (replicas are asked for the same index)."""

    def __init__(self, pending: PendingTensor, shape: tuple[int, ...]) -> None:
        self._read = _part_reader(pending)
        self._shape = shape
        self._parts: dict[tuple[Any, ...], np.ndarray[Any, Any]] = {}

    def __call__(self, index: tuple[slice, ...] | None) -> np.ndarray[Any, Any]:
        index = () if index is None else index
        key = tuple(
            part.indices(size) if isinstance(part, slice) else part
            for part, size in zip(index, self._shape, strict=False)
        )
        found = self._parts.get(key)
        if found is None:
            found = self._parts[key] = self._read(index)
        return found


def _part_reader(pending: PendingTensor) -> Callable[[tuple[Any, ...]], np.ndarray[Any, Any]]:
    """How to read one part of a planned tensor: the container reader's ``get_slice`` when
    the tensor comes straight from a file (possibly converted to another dtype), reading the
    part's bytes alone; else the whole tensor, read once and sliced in memory."""
    snapshot = _source_snapshot(pending)
    get_slice = None if snapshot is None else _reader_slice(snapshot)
    if snapshot is None or get_slice is None:
        whole = functools.cache(pending.read)
        return lambda index: whole()[index]
    if snapshot.dtype == pending.dtype:
        return get_slice
    numpy_dtype = pending.dtype.numpy
    return lambda index: get_slice(index).astype(numpy_dtype)


def _source_snapshot(pending: PendingTensor) -> TensorSnapshot | None:
    """The snapshot a planned tensor reads unchanged or only converted: the plan's reader is
    the snapshot's ``to_numpy``, or ``partial(convert, snapshot, dtype)`` with the planned
    dtype (`transfer` builds them so); None when anything else stands between."""
    read = pending.read
    owner = getattr(read, "__self__", None)
    if isinstance(owner, TensorSnapshot) and getattr(read, "__name__", None) == "to_numpy":
        return owner
    if isinstance(read, functools.partial) and len(read.args) == 2 and not read.keywords:
        snapshot, dtype = read.args
        if isinstance(snapshot, TensorSnapshot) and dtype == pending.dtype:
            return snapshot
    return None


def _reader_slice(
    snapshot: TensorSnapshot,
) -> Callable[[tuple[Any, ...]], np.ndarray[Any, Any]] | None:
    """``reader.get_slice(name)[index]`` when the snapshot comes straight from a container
    reader (`snapshot.part_reader`); else None."""
    return part_reader(snapshot)
