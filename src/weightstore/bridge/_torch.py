"""PyTorch modules as models: the only module in weightstore that imports torch.

Targets are the entries of ``model.state_dict()`` (parameters and persistent buffers, in that
order and under exactly those names). Saves from a bare state dict (no module) get their
snapshots here too (`tensor_snapshot`, `tensor_key`), for `_sources.py`, which cannot import
torch.

Loading runs through torch's own machinery, as ``Module.load_state_dict`` does, so modules'
load pre-hooks, overridden ``_load_from_state_dict`` methods and post hooks (how torch and model
libraries migrate old checkpoints: renamed keys, fused tensors, added buffers) all run. We walk
the modules ourselves, mirroring torch 2.13's ``load_state_dict``, for one reason: it copies its
input into an ``OrderedDict``, reading every tensor at once. We hand each module a
`LazyStateDict` instead, whose tensors are read only when torch copies them, so the peak is the
largest tensor, not the model. Per module, parent first:

1. Tied tensors another name already materialised from ``meta`` are pointed at that tensor.
2. A module with a direct tensor still on ``meta`` loads with torch's ``assign``: the loaded
   array (a view of a mapped file) becomes the parameter, with no second allocation. Its
   re-pointed ties are offered as themselves, so assigning keeps them tied.
3. Otherwise, tensors whose planned dtype differs (the ``from_record`` policy) are converted
   first, so torch's ``copy_`` keeps the source dtype.
4. ``_load_from_state_dict(view, prefix, metadata, strict=True, ...)`` runs, then the children,
   then the post hooks with the shared missing and unexpected keys, as torch runs them.

Like a plain dict given to ``load_state_dict`` (safetensors' ``load_model``), our files carry
no torch version metadata: modules see ``version`` None and migrate as from an old checkpoint
(BatchNorm fills a missing ``num_batches_tracked``). A path torch leaves out of its missing keys
and its error messages was loaded. Exceptions from a module's own code are reported for that
module's tensors, never raised. Afterwards tensors move to ``device`` and get their param ids.

A tensor read for ``copy_`` views the source's memory (no copy), which for a bytes-backed store
is read-only: a hook may replace tensors but must not change one in place (torch's own hooks
never do). Tensors that become parameters through ``assign`` are copied first if read-only.
"""

from __future__ import annotations

import functools
import re
import secrets
import warnings
from typing import Any, Final

import numpy as np
import torch
from torch.nn.modules.batchnorm import _NormBase
from torch.nn.modules.instancenorm import _InstanceNorm
from torch.nn.modules.module import _IncompatibleKeys

from weightstore.bridge._model import aliases_by_identity
from weightstore.bridge._state_view import LazyStateDict, Ledger, Unread
from weightstore.dtypes import DType, from_numpy, from_torch
from weightstore.errors import DTypeError
from weightstore.snapshot import TensorSnapshot
from weightstore.transfer._plan import LoadOutcome, LoadPlan, LoadReach, Target

__all__ = [
    "TORCH_FRAMEWORK",
    "TorchBridge",
    "array_to_torch",
    "param_id_of",
    "tensor_key",
    "tensor_snapshot",
    "torch_to_array",
]

PARAM_ID_ATTRIBUTE: Final = "_weightstore_param_id"
TORCH_FRAMEWORK: Final = "pt"  # SafeTensors' ``format`` metadata for torch tensors

# How torch 2.13's _load_from_state_dict names the key in its own error messages; `re` compiles
# (and caches) them when first needed, so only a load with errors pays.
_KEY_IN_MESSAGE: Final = (r'parameter named "(.+?)"', r"size mismatch for (\S+): ")

# torch's own loaders we know line by line, by the function that implements them: the leaves
# each fills with a value of its own when the source lacks them, and the leaves it removes from
# the source (InstanceNorm without running stats drops them, reporting an error). Any other
# override of _load_from_state_dict, like any load pre-hook, is code we cannot foresee.
_KNOWN_LOADERS: Final[dict[object, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    _NormBase._load_from_state_dict: (("num_batches_tracked",), ()),
    _InstanceNorm._load_from_state_dict: (
        ("num_batches_tracked",),  # it calls _NormBase's
        ("running_mean", "running_var"),
    ),
}


def param_id_of(tensor: torch.Tensor) -> int:
    """The tensor's stable u64 identity, drawn at random the first time it is asked for."""
    value = getattr(tensor, PARAM_ID_ATTRIBUTE, None)
    if value is None:
        value = secrets.randbits(64)
        setattr(tensor, PARAM_ID_ATTRIBUTE, value)
    return int(value)


def torch_to_array(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """A NumPy view of a CPU tensor's bytes (any dtype, bf16 and fp8 included), copied only when
    the tensor is not contiguous or not on the CPU."""
    if tensor.is_meta:
        raise DTypeError("tensor is on the meta device and has no data")
    dtype = from_torch(str(tensor.dtype))
    if dtype.numpy is None:
        raise DTypeError(f"torch dtype {tensor.dtype} has no NumPy form")
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    array = flat.view(torch.uint8).numpy().view(dtype.numpy)
    return array.reshape(tuple(tensor.shape))


def array_to_torch(array: np.ndarray[Any, Any], dtype: DType) -> torch.Tensor:
    """A CPU tensor sharing `array`'s memory (copied first only if not C-contiguous)."""
    if dtype.torch is None:
        raise DTypeError(f"dtype {dtype.name} has no torch form")
    if array.flags.writeable:  # the usual case (a copy-on-write mapping): no warning to hide
        return _sharing_tensor(array, dtype)
    with warnings.catch_warnings():  # costs more than the conversion; only for read-only data
        # Read-only sources are only ever copied from, never written through.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return _sharing_tensor(array, dtype)


# Dtypes whose arrays `torch.from_numpy` takes as they are. The rest (bf16 and fp8, which
# NumPy knows only through ml_dtypes) are viewed as bytes and reinterpreted by torch.
_FROM_NUMPY_AS_IS: Final = frozenset(
    {"F64", "F32", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL", "C64", "C128"}
)


def _sharing_tensor(array: np.ndarray[Any, Any], dtype: DType) -> torch.Tensor:
    """`array_to_torch` without its checks: one `from_numpy` where torch takes the dtype."""
    if dtype.name in _FROM_NUMPY_AS_IS and array.dtype == dtype.numpy and array.flags.c_contiguous:
        return torch.from_numpy(array)  # a fifth of the cost of the byte view below
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return torch.from_numpy(flat).view(getattr(torch, str(dtype.torch))).reshape(array.shape)


def tensor_snapshot(name: str, tensor: torch.Tensor) -> TensorSnapshot:
    """A lazy snapshot of one state-dict tensor: no module types (a state dict names none),
    the param id only if the tensor carries one (a ``keep_vars`` state dict's parameters),
    data viewed when read (copied only off the CPU or when not contiguous)."""
    return TensorSnapshot(
        tuple(name.split(".")), from_torch(str(tensor.dtype)), tuple(tensor.shape),
        functools.partial(torch_to_array, tensor), (), getattr(tensor, PARAM_ID_ATTRIBUTE, None),
    )  # fmt: skip


def tensor_key(tensor: torch.Tensor) -> tuple[object, ...]:
    """What makes two state-dict entries one tied tensor: ``state_dict()`` detaches each name
    separately, so a tie is the same memory, dtype, shape and strides, not the same object.
    Tensors without memory (meta, empty) are tied only to themselves."""
    address = tensor.data_ptr() if tensor.numel() and not tensor.is_meta else id(tensor)
    return (tensor.device, address, tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))


class _Containers:
    """The module type names from the root to each owner path (``"Net", "Linear"``), each
    module found once, from its parent's entry: a deep model's paths share their prefixes."""

    def __init__(self, model: torch.nn.Module) -> None:
        root: tuple[str, ...] = (type(model).__name__,)
        self._known = {"": (model, root)}

    def __call__(self, owner_path: str) -> tuple[str, ...]:
        return self._entry(owner_path)[1]

    def _entry(self, path: str) -> tuple[torch.nn.Module, tuple[str, ...]]:
        entry = self._known.get(path)
        if entry is None:
            parent_path, _, name = path.rpartition(".")
            parent, types = self._entry(parent_path)
            module = parent.get_submodule(name)
            entry = self._known[path] = (module, (*types, type(module).__name__))
        return entry


def _local_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's own loadable tensors: parameters, then persistent buffers (torch's order)."""
    tensors: dict[str, torch.Tensor] = {
        name: p for name, p in module._parameters.items() if p is not None
    }
    for name, buffer in module._buffers.items():
        if buffer is not None and name not in module._non_persistent_buffers_set:
            tensors[name] = buffer
    return tensors


def _copy_source(array: np.ndarray[Any, Any]) -> torch.Tensor:
    """A CPU tensor viewing `array`, for torch's ``copy_`` (which only reads it); a tensor
    as it is (a rank's DTensor shard, built by `_distributed.DTensorBridge`)."""
    if isinstance(array, torch.Tensor):
        return array
    return _tensor_of(array)


@functools.cache
def _numpy_as_is() -> frozenset[np.dtype[Any]]:
    """The NumPy dtypes of `_FROM_NUMPY_AS_IS`, in this machine's byte order."""
    names = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool",
             "complex64", "complex128")  # fmt: skip
    return frozenset(np.dtype(name) for name in names)


def _tensor_of(array: np.ndarray[Any, Any]) -> torch.Tensor:
    """``array_to_torch(array, from_numpy(array.dtype))``, with no table lookup where torch
    takes the array as it is: `from_numpy`'s first call indexes every dtype, importing
    ml_dtypes, a third of a first load into a meta model."""
    flags = array.flags
    if flags.writeable and flags.c_contiguous and array.dtype in _numpy_as_is():
        return torch.from_numpy(array)
    return array_to_torch(array, from_numpy(array.dtype))


def _key_of(message: str, local_keys: list[str], fallback: str) -> str:
    """The path a torch error message is about: the key torch's own format names, else the
    longest of the module's keys the message mentions, else `fallback` (the module)."""
    for pattern in _KEY_IN_MESSAGE:
        found = re.search(pattern, message)
        if found:
            return found.group(1)
    mentioned = [key for key in local_keys if key in message]
    return max(mentioned, key=len) if mentioned else fallback


class _Run:
    """One load's state across the module walk: torch's three lists, and our findings.

    A plain class: a slotted dataclass would cost ~0.4 ms to create at this module's import,
    which the first torch load pays."""

    __slots__ = ("error_msgs", "errors", "ledger", "missing_keys", "plan", "unexpected_keys")

    def __init__(self, plan: LoadPlan, ledger: Ledger) -> None:
        self.plan, self.ledger = plan, ledger
        self.missing_keys: list[str] = []
        self.unexpected_keys: list[str] = []
        self.error_msgs: list[str] = []
        self.errors: dict[str, str] = {}  # path -> first message about it


class TorchBridge:
    """Reads and writes the parameters and persistent buffers of an `nn.Module`; a
    `ModelBridge` whose loads run the model's own load hooks (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, device: Any = None) -> None:
        self._model = model
        self._device = None if device is None else torch.device(device)
        # The tensors as first seen; also keeps replaced meta tensors alive, so ids stay unique.
        self._state = {
            key: value
            for key, value in model.state_dict(keep_vars=True).items()
            if isinstance(value, torch.Tensor)
        }
        self._replaced: dict[int, torch.Tensor] = {}  # meta tensor id -> its materialisation
        # Re-pointing ties (`_retie`) has work only where one tensor sits under two names.
        self._has_ties = bool(aliases_by_identity(self._state.items()))

    @property
    def framework(self) -> str:
        """``"pt"``, as ``safetensors.torch.save_model`` and transformers write it."""
        return TORCH_FRAMEWORK

    @property
    def module_types(self) -> bool:
        """True: every snapshot names the module classes from the root to its owner."""
        return True

    def targets(self) -> list[Target]:
        """Every state_dict tensor, in state_dict order."""
        container_of = _Containers(self._model)
        dtypes: dict[torch.dtype, DType] = {}
        targets = []
        for key, tensor in self._state.items():
            container = container_of(key.rpartition(".")[0])
            dtype = dtypes.get(tensor.dtype)
            if dtype is None:
                dtype = dtypes[tensor.dtype] = from_torch(str(tensor.dtype))
            targets.append(Target(key, container, dtype, tuple(tensor.shape)))
        return targets

    def aliases(self) -> dict[str, str]:
        """Later state_dict names of one tensor object -> its first name."""
        return aliases_by_identity(self._state.items())

    def snapshots(self) -> list[TensorSnapshot]:
        """Snapshots viewing the tensors (copied only off the CPU or when not contiguous)."""
        snapshots = []
        for target in self.targets():
            tensor = self._state[target.path]
            snapshots.append(
                TensorSnapshot(
                    tuple(target.path.split(".")),
                    target.dtype,
                    target.shape,
                    functools.partial(torch_to_array, tensor),
                    target.container,
                    param_id_of(tensor),
                )
            )
        return snapshots

    def load_reach(self) -> LoadReach:
        """Where the model's own load code may act, from its modules as they are now.

        A module with a load pre-hook, or a ``_load_from_state_dict`` other than torch's own
        (`_KNOWN_LOADERS` and ``nn.Module``'s), may fill or consume anything under its prefix:
        its code sees exactly the keys under it. A load post hook makes the whole model
        reachable: it may clear any key from the load's shared missing-key list.
        """
        prefixes: set[str] = set()
        defaults: set[str] = set()
        consumed: set[str] = set()
        for name, module in self._model.named_modules(remove_duplicate=False):
            prefix = f"{name}." if name else ""
            if module._load_state_dict_post_hooks:
                prefixes.add("")
            loader = getattr(module._load_from_state_dict, "__func__", None)  # None: per object
            known = _KNOWN_LOADERS.get(loader)
            if module._load_state_dict_pre_hooks or (
                known is None and loader is not torch.nn.Module._load_from_state_dict
            ):
                prefixes.add(prefix)
            elif known is not None:
                defaults.update(prefix + leaf for leaf in known[0])
                consumed.update(prefix + leaf for leaf in known[1])
        return LoadReach(tuple(sorted(prefixes)), frozenset(defaults), frozenset(consumed))

    def load(self, plan: LoadPlan) -> LoadOutcome:
        """Load `plan` through the model's ``_load_from_state_dict`` and hooks, module by module.

        Planned tensors sit under their model paths and spare source tensors under their
        source names, all unread until torch or a hook reads them.
        """
        ledger = Ledger(plan.blocked)
        items: dict[str, Any] = {path: Unread(p.read) for path, p in plan.tensors.items()}
        for name, read in plan.spare.items():
            items.setdefault(name, Unread(read, spare_name=name))
        run = _Run(plan, ledger)
        self._visit(self._model, LazyStateDict(items, ledger, _copy_source), "", run)
        if self._has_ties and self._replaced:
            for module in self._model.modules():
                self._retie(module)  # a later name materialised while the first stayed on meta
        errors = {**run.errors, **ledger.failed}  # our read failure says more than torch's
        missing = set(run.missing_keys)
        loaded = {
            key
            for key in self._state
            if key not in missing and key not in errors and key not in plan.blocked
        }
        self._finish(plan, loaded)
        return LoadOutcome(loaded, errors, set(ledger.taken))

    def _visit(self, module: torch.nn.Module, keys: LazyStateDict, prefix: str, run: _Run) -> None:
        """Load `module`, then its children, then run its post hooks (torch's inner `load`).
        `keys` holds only keys under `prefix`, in a dict of this module's own (as torch's
        filtered copy is), so it is wrapped, not copied."""
        retied = self._retie(module)
        local = _local_tensors(module)
        assign = any(tensor.is_meta for tensor in local.values())
        if assign:
            view = keys.converting(self._assign_source)
            for name in retied:  # assigning the tie's own tensor keeps it tied
                if f"{prefix}{name}" in view:
                    view[f"{prefix}{name}"] = local[name]
        else:
            self._keep_source_dtypes(module, prefix, run.plan)
            view = keys.converting(_copy_source)
        self._load_module(module, view, prefix, local, assign, run)
        by_child = view.by_child(prefix)  # one pass, not one per child: torch's filter, grouped
        for name, child in module._modules.items():
            if child is not None:
                self._visit(child, by_child.get(name, view.empty()), f"{prefix}{name}.", run)
        self._post_hooks(module, prefix, run)

    def _load_module(
        self,
        module: torch.nn.Module,
        view: LazyStateDict,
        prefix: str,
        before: dict[str, torch.Tensor],
        assign: bool,
        run: _Run,
    ) -> None:
        """Run the module's ``_load_from_state_dict`` (pre-hooks included) and file what torch
        reports under the keys it is about. `before` is the module's `_local_tensors` now."""
        local_keys = [f"{prefix}{name}" for name in before]
        first_message = len(run.error_msgs)
        metadata = {"assign_to_params_buffers": True} if assign else {}
        try:
            module._load_from_state_dict(
                view, prefix, metadata, True, run.missing_keys, run.unexpected_keys,
                run.error_msgs,
            )  # fmt: skip
        except Exception as err:  # the model's own code: reported for its tensors, not raised
            message = f"loading {type(module).__name__} raised {type(err).__name__}: {err}"
            own = [key for key in local_keys if key not in run.plan.blocked]
            for key in own or [self._module_path(prefix)]:
                run.errors.setdefault(key, message)
        for message in run.error_msgs[first_message:]:
            key = _key_of(message, local_keys, self._module_path(prefix))
            run.errors.setdefault(key, message)
        if assign:
            self._note_replacements(module, before)

    def _post_hooks(self, module: torch.nn.Module, prefix: str, run: _Run) -> None:
        """Run the module's load post hooks on the shared lists, which they may edit in place."""
        if not module._load_state_dict_post_hooks:
            return  # most modules have none: no keys tuple to build
        incompatible = _IncompatibleKeys(run.missing_keys, run.unexpected_keys)
        for hook in module._load_state_dict_post_hooks.values():
            try:
                returned = hook(module, incompatible)
            except Exception as err:  # the model's own code, as in _load_module
                message = f"a load_state_dict post hook raised {type(err).__name__}: {err}"
                run.errors.setdefault(self._module_path(prefix), message)
                continue
            if returned is not None:  # torch raises AssertionError here
                run.errors.setdefault(
                    self._module_path(prefix),
                    "a load_state_dict post hook returned a value; it must edit its argument",
                )

    def _module_path(self, prefix: str) -> str:
        """Where a module-level failure is reported: the module's path, or the model's type."""
        return prefix[:-1] if prefix else type(self._model).__name__

    def _assign_source(self, array: np.ndarray[Any, Any]) -> torch.Tensor:
        """A tensor torch's ``assign`` makes the parameter: the array itself where possible;
        a tensor as it is (as in `_copy_source`)."""
        if isinstance(array, torch.Tensor):
            return array
        if not array.flags.writeable:
            array = array.copy()  # the parameter would otherwise write into immutable memory
        tensor = _tensor_of(array)
        return tensor if self._device is None else tensor.to(self._device)

    def _keep_source_dtypes(self, module: torch.nn.Module, prefix: str, plan: LoadPlan) -> None:
        """Convert tensors whose planned dtype differs (``from_record``), so that torch's
        ``copy_`` keeps the source dtype instead of converting to the model's."""
        for name, tensor in _local_tensors(module).items():
            pending = plan.tensors.get(f"{prefix}{name}")
            if pending is None or pending.dtype.torch is None:
                continue
            dtype = getattr(torch, pending.dtype.torch)
            if tensor.dtype != dtype:
                with torch.no_grad():
                    tensor.data = tensor.data.to(dtype)

    def _retie(self, module: torch.nn.Module) -> list[str]:
        """Point the module's meta tensors that another name already materialised at that
        tensor, so a tie stays one object; returns the names re-pointed."""
        retied: list[str] = []
        if not self._has_ties or not self._replaced:
            return retied  # no tensor under two names, or none materialised yet
        for name, tensor in _local_tensors(module).items():
            replacement = self._replaced.get(id(tensor))
            if replacement is not None and tensor.is_meta:
                setattr(module, name, replacement)
                retied.append(name)
        return retied

    def _note_replacements(self, module: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
        """Remember which meta tensors torch's ``assign`` replaced, and by what."""
        after = _local_tensors(module)
        for name, old in before.items():
            new = after.get(name)
            if new is not None and new is not old and old.is_meta and not new.is_meta:
                self._replaced[id(old)] = new

    def _finish(self, plan: LoadPlan, loaded: set[str]) -> None:
        """Move loaded tensors to ``device`` and restore the source's param ids on them."""
        if self._device is None and all(p.param_id is None for p in plan.tensors.values()):
            return  # nothing to move or mark (SafeTensors has no param ids): skip the lookups
        for key in self._state:
            tensor = self._tensor_at(key) if key in loaded else None
            if tensor is None:
                continue
            if self._device is not None and tensor.device != self._device:
                with torch.no_grad():
                    tensor.data = tensor.data.to(self._device)
            pending = plan.tensors.get(key)
            if pending is not None and pending.param_id is not None:
                setattr(tensor, PARAM_ID_ATTRIBUTE, pending.param_id)

    def _tensor_at(self, path: str) -> torch.Tensor | None:
        """The tensor a state_dict path names now (loading may have replaced the object)."""
        owner_path, _, name = path.rpartition(".")
        owner = self._model.get_submodule(owner_path)
        if name in owner._parameters:
            return owner._parameters[name]
        return owner._buffers.get(name)
