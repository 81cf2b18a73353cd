"""What a failed load says and what it leaves (issue 10, "errors that mislead").

Names that differ by a prefix get the exact builder call that fixes them, and a load that loads
nothing fails whatever the options; a dtype mismatch names the adapter that converts it; a failed
strict load leaves the model byte for byte as it was, except where only the model's own load
code could tell; saves replace a file only after ``.overwrite()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import (
    BurnpackStore,
    LoadFailedError,
    PathFilter,
    PytorchStore,
    SafetensorsStore,
    load_from,
    save_into,
)
from weightstore.adapters import FloatCastAdapter, HalfPrecisionAdapter
from weightstore.errors import DestinationExistsError


def _torch() -> Any:
    """torch, or skip the test (the NumPy tests here run without it)."""
    return pytest.importorskip("torch")


def _memory_store(tensors: dict[str, Any]) -> SafetensorsStore:
    """A SafeTensors store over bytes holding `tensors` (NumPy arrays or torch tensors)."""
    arrays = {k: v.detach().numpy() if hasattr(v, "detach") else v for k, v in tensors.items()}
    saved = SafetensorsStore.from_bytes()
    save_into(arrays, saved)
    return SafetensorsStore.from_bytes(saved.get_bytes())


def _cnn_state(prefix: str = "") -> dict[str, Any]:
    """A seeded Cnn's state dict with `prefix` before every name; 9 tensors, BatchNorm's
    counter included."""
    torch = _torch()
    from tests.stores.models import Cnn

    torch.manual_seed(0)
    return {f"{prefix}{k}": v for k, v in Cnn().state_dict().items()}


def _bytes_of_torch(model: Any) -> dict[str, tuple[str, bytes, bool]]:
    """Every parameter and buffer, byte for byte, with its dtype and requires_grad."""
    return {
        name: (str(t.dtype), t.detach().cpu().numpy().tobytes(), t.requires_grad)
        for name, t in model.state_dict(keep_vars=True).items()
    }


def _numpy_model(value: float = 0.0) -> dict[str, Any]:
    def layer(rows: int, cols: int) -> dict[str, Any]:
        return {
            "weight": np.full((rows, cols), value, np.float32),
            "bias": np.full(rows, value, np.float32),
        }

    return {"enc": layer(3, 2), "dec": layer(2, 3), "steps": np.array(0, np.int64)}


def _bytes_of_numpy(model: dict[str, Any], prefix: str = "") -> dict[str, tuple[str, bytes]]:
    found: dict[str, tuple[str, bytes]] = {}
    for key, value in model.items():
        if isinstance(value, dict):
            found.update(_bytes_of_numpy(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = (str(value.dtype), value.tobytes())
    return found


def _flat(model: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in model.items():
        if isinstance(value, dict):
            found.update(_flat(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found


# -- names that differ by a prefix ---------------------------------------------------------------


@pytest.mark.parametrize("partial", [False, True])
def test_a_prefix_on_every_name_names_the_remapping_and_loads_nothing(partial: bool) -> None:
    _torch()
    from tests.stores.models import Cnn

    store = _memory_store(_cnn_state("module.")).allow_partial(partial)
    model = Cnn()
    before = _bytes_of_torch(model)
    with pytest.raises(LoadFailedError) as caught:
        load_from(model, store)  # allow_partial(True) once "succeeded" with 0 tensors applied
    error = caught.value
    assert error.failure == "nothing_loaded" and error.result.refused == "nothing_loaded"
    fix = '.with_key_remapping(r"^module\\.", "")'
    first_line = str(error).splitlines()[0]
    assert first_line == (
        "<memory>: no tensor would load into the model (9 missing from the source); nothing was "
        "written, the model is unchanged; 9 of 9 missing tensors are in the source as 'module.' "
        f"+ their name: load with {fix}; no option accepts a load that loads nothing"
    )
    assert f"💡 Fix: add {fix} to the store" in str(error.result)
    assert not error.result.is_success()
    assert _bytes_of_torch(model) == before
    result = load_from(model, store.with_key_remapping(r"^module\.", ""))  # the fix works
    assert result.is_success() and len(result.applied) == 9


def test_a_prefix_the_source_lacks_names_the_remapping_that_adds_it() -> None:
    torch = _torch()
    from tests.stores.models import Cnn

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Cnn()

    store = _memory_store(_cnn_state())
    with pytest.raises(LoadFailedError) as caught:
        load_from(Wrapped(), store)
    fix = '.with_key_remapping("^(.*)$", "model.$1")'
    assert caught.value.fix.startswith(
        f"9 of 9 missing tensors are in the source without their 'model.' prefix: load with {fix}"
    )
    assert load_from(Wrapped(), store.with_key_remapping(r"^(.*)$", "model.$1")).is_success()


def test_a_checkpoint_under_a_top_level_key_names_with_top_level_key(tmp_path: Path) -> None:
    torch = _torch()
    from tests.stores.models import Cnn

    path = tmp_path / "ckpt.pt"
    torch.save({"state_dict": _cnn_state(), "epoch": 3}, path)
    with pytest.raises(LoadFailedError) as caught:
        load_from(Cnn(), PytorchStore.from_file(path).allow_partial())
    error = caught.value
    assert error.path == str(path) and error.result.top_level_key == "state_dict"
    assert 'load with .with_top_level_key("state_dict")' in error.fix
    assert '💡 Fix: add .with_top_level_key("state_dict") to the store' in str(error.result)
    fixed = PytorchStore.from_file(path).with_top_level_key("state_dict")
    assert load_from(Cnn(), fixed).is_success()


def test_a_dotted_flat_name_is_no_top_level_key(tmp_path: Path) -> None:
    # Flat keys that merely start with "state_dict." cannot be read under that key: the store
    # checks, and falls back to the remapping.
    torch = _torch()
    from tests.stores.models import Cnn

    path = tmp_path / "flat.pt"
    torch.save(_cnn_state("state_dict."), path)
    with pytest.raises(LoadFailedError) as caught:
        load_from(Cnn(), PytorchStore.from_file(path))
    assert caught.value.result.top_level_key is None
    assert 'load with .with_key_remapping(r"^state_dict\\.", "")' in caught.value.fix
    # a SafeTensors store has no top-level keys at all
    with pytest.raises(LoadFailedError) as caught:
        load_from(Cnn(), _memory_store(_cnn_state("state_dict.")))
    assert 'load with .with_key_remapping(r"^state_dict\\.", "")' in caught.value.fix


def test_a_filter_that_keeps_nothing_loads_nothing_and_fails() -> None:
    store = _memory_store(_flat(_numpy_model(1.0)))
    keep_none = PathFilter().with_regex("^nowhere")
    with pytest.raises(LoadFailedError) as caught:
        load_from(_numpy_model(), store.filter(keep_none).allow_partial())
    assert caught.value.failure == "nothing_loaded"
    assert "check the filter (it excludes 5)" in caught.value.fix


def test_a_partial_load_that_loads_something_still_succeeds() -> None:
    source = _flat(_numpy_model(1.0))
    del source["steps"]
    model = _numpy_model()
    result = load_from(model, _memory_store(source).allow_partial())
    assert result.is_success() and result.missing == [("steps", "dict")]
    assert model["enc"]["weight"][0, 0] == 1.0


# -- dtypes ----------------------------------------------------------------------------------------


def test_f32_into_a_half_model_names_the_adapter_that_loads_it() -> None:
    torch = _torch()
    from tests.stores.models import Cnn

    state = _cnn_state()
    store = _memory_store(state)
    model = Cnn().half()
    before = _bytes_of_torch(model)
    with pytest.raises(LoadFailedError) as caught:
        load_from(model, store)
    error = caught.value
    assert error.failure == "errors" and {e.kind for e in error.result.errors} == {"dtype_mismatch"}
    assert error.fix == (
        "load with .with_from_adapter(HalfPrecisionAdapter()), or use .validate(False) to load the "
        "rest and leave these 8 unloaded"
    )
    assert all(
        e.message.endswith("load with .with_from_adapter(HalfPrecisionAdapter())")
        for e in error.result.errors
    )
    assert _bytes_of_torch(model) == before
    # The adapter the hint names loads it, BatchNorm included (its stats stay F32 in Burn's
    # half-precision files, and a .half() model holds them in F16).
    result = load_from(model, store.with_from_adapter(HalfPrecisionAdapter()))
    assert result.is_success() and len(result.applied) == 9
    for name, tensor in model.state_dict().items():
        expected = state[name].half() if state[name].is_floating_point() else state[name]
        assert tensor.dtype == expected.dtype and torch.equal(tensor, expected), name


def test_half_precision_keeps_an_f32_batch_norm_of_a_mixed_model_exact() -> None:
    torch = _torch()
    from tests.stores.models import Cnn

    state = _cnn_state()
    model = Cnn()
    model.conv.half()
    model.fc.half()  # the norm stays F32, as mixed-precision models keep it
    store = _memory_store(state).with_from_adapter(HalfPrecisionAdapter())
    assert load_from(model, store).is_success()
    assert torch.equal(model.norm.running_var, state["norm.running_var"])  # not via F16
    assert torch.equal(model.conv.weight.detach(), state["conv.weight"].half())


def test_validate_off_leaves_the_mismatched_tensors_unloaded() -> None:
    model = {"w": np.zeros(2, np.float16), "b": np.zeros(2, np.float32)}
    store = _memory_store({"w": np.ones(2, np.float32), "b": np.ones(2, np.float32)})
    result = load_from(model, store.validate(False))
    assert [(e.kind, e.path, e.fix_adapter) for e in result.errors] == [
        ("dtype_mismatch", "w", "HalfPrecisionAdapter()")
    ]
    assert model["w"].tolist() == [0.0, 0.0] and model["b"].tolist() == [1.0, 1.0]
    cast = load_from(model, store.with_from_adapter(FloatCastAdapter.to("F16")))
    assert cast.is_success() and model["w"].tolist() == [1.0, 1.0]


# -- a failed strict load leaves the model as it was ------------------------------------------


def _without(tensors: dict[str, Any], name: str) -> dict[str, Any]:
    return {key: value for key, value in tensors.items() if key != name}


@pytest.mark.parametrize(
    "case", ["missing", "shape", "dtype", "missing-and-shape"], ids=lambda case: case
)
def test_a_failed_strict_load_leaves_a_torch_model_byte_for_byte(case: str) -> None:
    torch = _torch()
    from tests.stores.models import Cnn

    state = {k: v + 1 if v.is_floating_point() else v + 7 for k, v in _cnn_state().items()}
    if case in ("missing", "missing-and-shape"):
        state = _without(state, "fc.bias")  # 8 of 9 tensors would load
    if case in ("shape", "missing-and-shape"):
        state["conv.bias"] = torch.zeros(5)
    if case == "dtype":
        state["norm.running_var"] = state["norm.running_var"].double()
    model = Cnn()
    before = _bytes_of_torch(model)
    with pytest.raises(LoadFailedError) as caught:
        load_from(model, _memory_store(state))
    assert _bytes_of_torch(model) == before  # every parameter and buffer, byte for byte
    error = caught.value
    assert error.result.refused is not None and error.result.applied == []
    assert len(error.result.held_back) == (7 if case == "missing-and-shape" else 8)
    assert "nothing was written, the model is unchanged" in str(error).splitlines()[0]


@pytest.mark.parametrize("case", ["missing", "shape", "dtype"])
def test_a_failed_strict_load_leaves_a_numpy_model_byte_for_byte(case: str) -> None:
    source = _flat(_numpy_model(1.0))
    if case == "missing":
        del source["dec.bias"]
    elif case == "shape":
        source["enc.bias"] = np.ones(4, np.float32)
    else:
        source["steps"] = np.array(3.5, np.float64)
    model = _numpy_model(0.25)
    before = _bytes_of_numpy(model)
    with pytest.raises(LoadFailedError) as caught:
        load_from(model, _memory_store(source))
    assert _bytes_of_numpy(model) == before
    assert caught.value.result.refused == ("missing" if case == "missing" else "errors")


def test_a_missing_batch_norm_counter_is_no_reason_to_refuse() -> None:
    # BatchNorm's own loader fills a counter the source lacks (Burn's files have none).
    _torch()
    from tests.stores.models import Cnn

    model = Cnn()
    result = load_from(model, _memory_store(_without(_cnn_state(), "norm.num_batches_tracked")))
    assert result.is_success() and "norm.num_batches_tracked" in result.applied


def test_a_counter_the_model_fills_itself_is_no_load() -> None:
    # Nothing from the source reached the model: the counter BatchNorm keeps is not "applied",
    # so the load loaded nothing, refused before writing.
    _torch()
    from tests.stores.models import Cnn

    store = _memory_store(_cnn_state("module.")).allow_partial()
    with pytest.raises(LoadFailedError) as caught:
        load_from(Cnn(), store)
    assert ("norm.num_batches_tracked", "Cnn.BatchNorm2d") in caught.value.result.missing


def _renamed_model() -> Any:
    """A model whose root pre-hook renames the old key ``old.weight`` to ``new.weight``."""
    torch = _torch()

    def rename(state_dict: Any, prefix: str, *args: Any) -> None:
        if f"{prefix}old.weight" in state_dict:
            state_dict[f"{prefix}new.weight"] = state_dict.pop(f"{prefix}old.weight")

    model = torch.nn.Module()
    model.new = torch.nn.Linear(2, 2, bias=False)
    model.other = torch.nn.Linear(2, 2)
    model._register_load_state_dict_pre_hook(rename)
    return model


def test_a_path_a_load_hook_may_fill_is_not_refused_before_it_runs() -> None:
    torch = _torch()
    old = {"old.weight": torch.ones(2, 2), "other.weight": torch.ones(2, 2),
           "other.bias": torch.ones(2)}  # fmt: skip
    model = _renamed_model()
    result = load_from(model, _memory_store(old))  # strict: new.weight looks missing at first
    assert result.is_success() and result.applied == ["new.weight", "other.weight", "other.bias"]
    assert not result.unused


def test_what_only_a_load_hook_can_tell_fails_after_writing_and_says_so() -> None:
    # The documented limit: the pre-check cannot refuse what the hook might have supplied, so
    # the load runs; the error then says the model is partly loaded.
    torch = _torch()
    old = {"old.weight": torch.ones(2, 2), "other.weight": torch.ones(2, 2)}  # no other.bias
    model = _renamed_model()
    with pytest.raises(LoadFailedError) as caught:
        load_from(model, _memory_store(old))
    error = caught.value
    assert error.failure == "missing" and error.result.refused is None
    assert error.result.applied == ["new.weight", "other.weight"]
    assert "2 tensors were written before this showed" in str(error).splitlines()[0]
    assert "the model is partly loaded" in str(error).splitlines()[0]
    assert torch.equal(model.other.weight.detach(), torch.ones(2, 2))


def test_every_error_of_a_real_load_has_a_message() -> None:
    source = {**_flat(_numpy_model(1.0)), "enc.weight": np.ones((2, 3), np.float32)}
    result = load_from(_numpy_model(), _memory_store(source).validate(False))
    (error,) = result.errors
    assert error.message == (
        "transposed, as Burn stores Linear weights; load with "
        ".with_from_adapter(BurnToPyTorchAdapter())"
    )


# -- one rule for replacing files ------------------------------------------------------------------


@pytest.mark.parametrize("store_type", [BurnpackStore, SafetensorsStore])
def test_a_save_replaces_a_file_only_after_overwrite(tmp_path: Path, store_type: Any) -> None:
    path = tmp_path / f"model.{store_type.FORMAT.extensions[0]}"
    save_into(_numpy_model(1.0), store_type.from_file(path))
    with pytest.raises(DestinationExistsError) as caught:
        save_into(_numpy_model(2.0), store_type.from_file(path))
    assert caught.value.path == str(path)
    assert str(caught.value) == (
        f"{path}: file exists; to replace it, call .overwrite() on the store or record (a "
        "writer's save and write_file take overwrite=True)"
    )
    save_into(_numpy_model(2.0), store_type.from_file(path).overwrite())
    model = _numpy_model()
    load_from(model, store_type.from_file(path))
    assert model["steps"] == 0 and model["enc"]["weight"][0, 0] == 2.0
