"""Loads run through torch's own machinery: pre-hooks, overridden `_load_from_state_dict` and
post hooks migrate old checkpoints, on real and on meta-built models, and the report says
exactly what happened to every tensor."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from weightstore import (  # noqa: E402
    ApplyResult,
    LoadFailedError,
    PathFilter,
    SafetensorsStore,
    TensorSnapshot,
    apply,
    load_from,
    save_into,
)

# -- models that migrate old checkpoints, as model libraries do ----------------------------------


def _rename_old_key(state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """A pre-hook; `args` are local_metadata, strict, missing, unexpected and error lists."""
    old, new = f"{prefix}old_name.weight", f"{prefix}new_name.weight"
    if old in state_dict:
        state_dict[new] = state_dict.pop(old)


class Renamed(nn.Module):
    """Once had `old_name`; a pre-hook on the parent renames the checkpoint key."""

    def __init__(self) -> None:
        super().__init__()
        self.new_name = nn.Linear(4, 3, bias=False)
        self.other = nn.Linear(3, 2)
        self._register_load_state_dict_pre_hook(_rename_old_key)


class FusedAttention(nn.Module):
    """Old checkpoints hold one fused `qkv.weight`; `_load_from_state_dict` splits it."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 4, bias=False)
        self.k = nn.Linear(4, 4, bias=False)
        self.v = nn.Linear(4, 4, bias=False)

    def _load_from_state_dict(
        self, state_dict: Any, prefix: str, local_metadata: Any, strict: bool,
        missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str],
    ) -> None:  # fmt: skip
        fused = f"{prefix}qkv.weight"
        if fused in state_dict:
            q, k, v = state_dict.pop(fused).chunk(3, dim=0)
            state_dict[f"{prefix}q.weight"] = q
            state_dict[f"{prefix}k.weight"] = k
            state_dict[f"{prefix}v.weight"] = v
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


class WithAttention(nn.Module):
    """The fused block inside a model, so the split happens under a prefix."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = FusedAttention()
        self.out = nn.Linear(4, 2)


class TiedMigrating(nn.Module):
    """A tied head, a fused attention block and a renamed layer, as a meta-built LM might be."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.attn = FusedAttention()
        self.new_name = nn.Linear(4, 4, bias=False)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight
        self._register_load_state_dict_pre_hook(_rename_old_key)


def _store(tensors: Mapping[str, np.ndarray[Any, Any]]) -> SafetensorsStore:
    """A safetensors store over bytes holding `tensors` (an old checkpoint)."""
    saved = SafetensorsStore.from_bytes()
    save_into(dict(tensors), saved)
    return SafetensorsStore.from_bytes(saved.get_bytes())


def _values(*shape: int, start: float = 0.0) -> np.ndarray[Any, Any]:
    count = int(np.prod(shape))
    return (np.arange(count, dtype=np.float32) / 8 + start).reshape(shape)


def _old_renamed_checkpoint() -> dict[str, np.ndarray[Any, Any]]:
    return {
        "old_name.weight": _values(3, 4),
        "other.weight": _values(2, 3, start=1),
        "other.bias": _values(2, start=2),
    }


def _old_attention_checkpoint() -> dict[str, np.ndarray[Any, Any]]:
    return {
        "attn.qkv.weight": _values(12, 4),
        "out.weight": _values(2, 4, start=3),
        "out.bias": _values(2, start=4),
    }


def _old_tied_checkpoint() -> dict[str, np.ndarray[Any, Any]]:
    return {
        "embed.weight": _values(5, 4, start=5),
        "attn.qkv.weight": _values(12, 4),
        "old_name.weight": _values(4, 4, start=6),
    }


# -- pre-hooks, overridden loaders, post hooks ----------------------------------------------------


def test_pre_hook_renames_an_old_key() -> None:
    model = Renamed()
    result = load_from(model, _store(_old_renamed_checkpoint()))
    assert result.applied == ["new_name.weight", "other.weight", "other.bias"]
    assert not result.missing and not result.unused and not result.errors
    np.testing.assert_array_equal(model.new_name.weight.detach().numpy(), _values(3, 4))
    np.testing.assert_array_equal(model.other.bias.detach().numpy(), _values(2, start=2))


def test_public_pre_hook_with_module_runs() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    seen: list[str] = []

    def hook(module: nn.Module, state_dict: Any, prefix: str, *args: Any) -> None:
        seen.append(f"{type(module).__name__}:{prefix}")
        if f"{prefix}legacy_w" in state_dict:
            state_dict[f"{prefix}weight"] = state_dict.pop(f"{prefix}legacy_w")

    model[0].register_load_state_dict_pre_hook(hook)
    result = load_from(model, _store({"0.legacy_w": _values(2, 2), "0.bias": _values(2)}))
    assert seen == ["Linear:0."]
    assert result.applied == ["0.weight", "0.bias"] and not result.unused
    np.testing.assert_array_equal(model[0].weight.detach().numpy(), _values(2, 2))


def test_overridden_load_from_state_dict_splits_a_fused_tensor() -> None:
    model = WithAttention()
    result = load_from(model, _store(_old_attention_checkpoint()))
    assert result.applied == ["attn.q.weight", "attn.k.weight", "attn.v.weight", "out.weight",
                              "out.bias"]  # fmt: skip
    assert not result.missing and not result.unused and not result.errors
    fused = _values(12, 4)
    np.testing.assert_array_equal(model.attn.q.weight.detach().numpy(), fused[:4])
    np.testing.assert_array_equal(model.attn.v.weight.detach().numpy(), fused[8:])


def test_post_hook_runs_after_children_with_the_incompatible_keys() -> None:
    model = WithAttention()
    calls: list[tuple[str, list[str], list[str]]] = []

    def post_hook(module: nn.Module, incompatible: Any) -> None:
        calls.append((type(module).__name__, list(incompatible.missing_keys),
                      list(incompatible.unexpected_keys)))  # fmt: skip

    model.attn.register_load_state_dict_post_hook(post_hook)
    model.register_load_state_dict_post_hook(post_hook)
    load_from(model, _store(_old_attention_checkpoint()))
    assert calls == [("FusedAttention", [], []), ("WithAttention", [], [])]


def test_post_hook_clearing_a_missing_key_satisfies_the_load() -> None:
    model = nn.Sequential(nn.Linear(2, 2))

    def post_hook(module: nn.Module, incompatible: Any) -> None:
        if "0.bias" in incompatible.missing_keys:
            incompatible.missing_keys.remove("0.bias")  # the module initialises it itself

    model.register_load_state_dict_post_hook(post_hook)
    result = load_from(model, _store({"0.weight": _values(2, 2)}))
    assert not result.missing and not result.errors


def test_source_tensor_a_hook_leaves_in_place_stays_unused() -> None:
    model = Renamed()
    tensors = {**_old_renamed_checkpoint(), "stale.thing": _values(3)}
    result = load_from(model, _store(tensors))
    assert result.unused == ["stale.thing"]
    assert "new_name.weight" in result.applied


def test_shape_mismatch_after_a_hook_is_a_load_error_for_its_key() -> None:
    model = Renamed()
    tensors = {**_old_renamed_checkpoint(), "old_name.weight": _values(4, 3)}
    store = _store(tensors).validate(False)
    result = load_from(model, store)
    assert [(e.kind, e.path) for e in result.errors] == [("load_error", "new_name.weight")]
    assert "size mismatch" in result.errors[0].message
    assert "new_name.weight" not in result.applied and not result.missing
    assert not result.unused
    with pytest.raises(LoadFailedError):
        load_from(Renamed(), _store(tensors))


def test_our_shape_check_runs_before_torch_copies() -> None:
    model = Renamed()
    before = model.other.weight.detach().clone()
    tensors = {**_old_renamed_checkpoint(), "other.weight": _values(3, 2)}
    result = load_from(model, _store(tensors).validate(False))
    assert [(e.kind, e.path) for e in result.errors] == [("shape_mismatch", "other.weight")]
    assert torch.equal(model.other.weight.detach(), before)


def test_exception_in_a_hook_is_reported_not_raised() -> None:
    model = nn.Sequential(nn.Linear(2, 2))

    def broken(state_dict: Any, prefix: str, *args: Any) -> None:
        raise ValueError("cannot migrate this checkpoint")

    model[0]._register_load_state_dict_pre_hook(broken)
    store = _store({"0.weight": _values(2, 2), "0.bias": _values(2)})
    result = apply(model, list(store.get_all_snapshots().values()))
    assert sorted(e.path for e in result.errors) == ["0.bias", "0.weight"]
    assert "cannot migrate this checkpoint" in result.errors[0].message
    assert not result.applied


def test_filtered_out_tensor_is_not_written_even_by_a_hook() -> None:
    model = Renamed()
    before = model.new_name.weight.detach().clone()
    keep = PathFilter().with_predicate(lambda path, container: not path.startswith("new_name"))
    result = load_from(model, _store(_old_renamed_checkpoint()).filter(keep).allow_partial())
    assert result.skipped == ["new_name.weight"]
    assert "new_name.weight" not in result.applied
    assert torch.equal(model.new_name.weight.detach(), before)


def test_each_tensor_is_read_once_and_only_when_loaded() -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    reads: list[str] = []

    def counted(name: str, array: np.ndarray[Any, Any]) -> Callable[[], np.ndarray[Any, Any]]:
        def load() -> np.ndarray[Any, Any]:
            reads.append(name)
            return array

        return load

    arrays = {k: v.detach().numpy() + 1 for k, v in model.state_dict().items()}
    snapshots = [
        TensorSnapshot(
            tuple(k.split(".")), TensorSnapshot.from_array(k, a).dtype, a.shape, counted(k, a)
        )
        for k, a in arrays.items()
    ]
    result = apply(model, snapshots)
    assert len(result.applied) == 4
    assert reads == list(arrays)


# -- the meta device -----------------------------------------------------------------------------


def test_meta_model_loads_through_hooks_with_ties_kept() -> None:
    with torch.device("meta"):
        model = TiedMigrating()
    assert model.head.weight is model.embed.weight
    result = load_from(model, _store(_old_tied_checkpoint()))
    assert result.applied == ["embed.weight", "attn.q.weight", "attn.k.weight",
                              "attn.v.weight", "new_name.weight", "head.weight"]  # fmt: skip
    assert not result.missing and not result.unused and not result.errors
    assert not any(t.is_meta for t in model.state_dict().values())
    assert model.head.weight is model.embed.weight  # one Parameter under both names
    assert isinstance(model.embed.weight, nn.Parameter) and model.embed.weight.requires_grad
    checkpoint = _old_tied_checkpoint()
    np.testing.assert_array_equal(model.embed.weight.detach().numpy(), checkpoint["embed.weight"])
    np.testing.assert_array_equal(model.attn.k.weight.detach().numpy(),
                                  checkpoint["attn.qkv.weight"][4:8])  # fmt: skip
    np.testing.assert_array_equal(model.new_name.weight.detach().numpy(),
                                  checkpoint["old_name.weight"])  # fmt: skip


def test_meta_model_tie_kept_when_the_file_has_both_names() -> None:
    with torch.device("meta"):
        model = TiedMigrating()
    tensors = {**_old_tied_checkpoint(), "head.weight": _old_tied_checkpoint()["embed.weight"]}
    result = load_from(model, _store(tensors))
    assert "head.weight" in result.applied and not result.errors and not result.unused
    assert model.head.weight is model.embed.weight
    assert not model.head.weight.is_meta


def test_meta_model_post_hook_and_batch_norm_buffers() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    ran: list[bool] = []
    model.register_load_state_dict_post_hook(lambda module, keys: ran.append(not keys.missing_keys))
    source = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    tensors = {k: v.detach().numpy() for k, v in source.state_dict().items()}
    result = load_from(model, _store(tensors))
    assert ran == [True] and len(result.applied) == len(tensors)
    assert not any(t.is_meta for t in model.state_dict().values())
    assert torch.equal(model[1].running_var, source[1].running_var)


def test_param_ids_are_restored_through_torch() -> None:
    model = nn.Linear(2, 2)
    snapshots = [
        TensorSnapshot.from_array("weight", _values(2, 2), param_id=7),
        TensorSnapshot.from_array("bias", _values(2), param_id=8),
    ]
    assert isinstance(apply(model, snapshots), ApplyResult)
    assert model.weight._weightstore_param_id == 7  # type: ignore[attr-defined]
    assert model.bias._weightstore_param_id == 8  # type: ignore[attr-defined]


def test_at_most_one_read_tensor_is_alive_when_the_next_is_read() -> None:
    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(4)))
    alive: list[weakref.ref[np.ndarray[Any, Any]]] = []
    peak = [0]

    def fresh(array: np.ndarray[Any, Any]) -> Callable[[], np.ndarray[Any, Any]]:
        def load() -> np.ndarray[Any, Any]:
            peak[0] = max(peak[0], sum(ref() is not None for ref in alive))
            copy = array.copy()  # a new array per read, as a file read would give
            alive.append(weakref.ref(copy))
            return copy

        return load

    snapshots = [
        TensorSnapshot(
            tuple(k.split(".")), TensorSnapshot.from_array(k, a).dtype, a.shape, fresh(a)
        )
        for k, a in ((k, v.detach().numpy() + 1) for k, v in model.state_dict().items())
    ]
    assert len(apply(model, snapshots).applied) == 8
    assert peak[0] <= 1  # torch still holds the previous tensor while the next is read


def test_unreadable_tensor_is_a_load_error_and_the_rest_loads() -> None:
    model = nn.Linear(2, 2)

    def broken() -> np.ndarray[Any, Any]:
        raise OSError("disk went away")

    snapshots = [
        TensorSnapshot(
            ("weight",), TensorSnapshot.from_array("w", _values(2, 2)).dtype, (2, 2), broken
        ),
        TensorSnapshot.from_array("bias", _values(2)),
    ]
    result = apply(model, snapshots)
    assert [(e.kind, e.path) for e in result.errors] == [("load_error", "weight")]
    assert "disk went away" in result.errors[0].message
    assert result.applied == ["bias"]


def test_hook_may_consume_and_discard_an_obsolete_tensor() -> None:
    model = nn.Sequential(nn.Linear(2, 2))

    def drop_obsolete(state_dict: Any, prefix: str, *args: Any) -> None:
        state_dict.pop(f"{prefix}0.obsolete_scale", None)

    model._register_load_state_dict_pre_hook(drop_obsolete)
    tensors = {"0.weight": _values(2, 2), "0.bias": _values(2), "0.obsolete_scale": _values(1)}
    result = load_from(model, _store(tensors))
    assert not result.unused and result.applied == ["0.weight", "0.bias"]


@pytest.mark.parametrize("meta", [False, True])
def test_from_record_keeps_the_source_dtype(meta: bool) -> None:
    with torch.device("meta" if meta else "cpu"):
        model = nn.Linear(2, 2)
    snapshots = [
        TensorSnapshot.from_array("weight", _values(2, 2).astype(np.float64)),
        TensorSnapshot.from_array("bias", _values(2)),
    ]
    result = apply(model, snapshots, dtype_policy="from_record")
    assert result.applied == ["weight", "bias"] and not result.errors
    assert model.weight.dtype == torch.float64 and model.bias.dtype == torch.float32
    assert isinstance(model.weight, nn.Parameter) and not model.weight.is_meta
    np.testing.assert_array_equal(model.weight.detach().numpy(), _values(2, 2))


def test_cast_converts_and_exact_refuses_a_lossy_dtype() -> None:
    model = nn.Linear(2, 2)
    wide = [TensorSnapshot.from_array("weight", _values(2, 2).astype(np.float64) + 1e-12)]
    result = apply(model, wide, dtype_policy="cast")
    assert result.applied == ["weight"] and model.weight.dtype == torch.float32
    refused = apply(nn.Linear(2, 2), wide)  # "exact"
    assert [(e.kind, e.path) for e in refused.errors] == [("dtype_mismatch", "weight")]


def test_cpu_device_option_and_requires_grad_kept() -> None:
    model = nn.Linear(2, 2)
    model.bias.requires_grad_(False)
    snapshots = [TensorSnapshot.from_array("bias", _values(2))]
    assert apply(model, snapshots, device="cpu").applied == ["bias"]
    assert not model.bias.requires_grad and model.weight.requires_grad
