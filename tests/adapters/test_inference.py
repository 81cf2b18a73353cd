"""Module types inferred from a file's names and shapes: the rules, when an ambiguous owner
matters, and a model-free save that converts for Burn exactly as ``weightstore convert
--to-burn`` does, refusing the same tensors."""

from __future__ import annotations

import contextlib
import io
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import BurnpackStore, SafetensorsStore, TensorSnapshot, save_into
from weightstore.adapters import (
    FloatCastAdapter,
    HalfPrecisionAdapter,
    ModuleGuess,
    ModuleTypeRule,
    PyTorchToBurnAdapter,
    assign_module_types,
    infer_module_types,
    needs_module_types,
)
from weightstore.burnpack import BurnpackReader
from weightstore.cli import main
from weightstore.entry import TensorEntry
from weightstore.errors import InvalidOptionError, ModuleTypeNeededError
from weightstore.safetensors import write_file

SHAPES = {
    "bn.weight": (4,), "bn.bias": (4,), "bn.running_mean": (4,), "bn.running_var": (4,),
    "bn.num_batches_tracked": (),
    "burn_norm.gamma": (4,), "burn_norm.beta": (4,),
    "conv1.weight": (4, 3, 3), "conv2.weight": (4, 3, 3, 3), "conv2.bias": (4,),
    "conv3.weight": (1, 1, 1, 1, 1),
    "fc.weight": (5, 7), "fc.bias": (5,),
    "square.weight": (5, 5), "square.bias": (5,),
    "emb.weight": (9, 5),
    "ln.weight": (5,), "ln.bias": (5,),
    "rms.weight": (5,),
    "custom.weight": (5, 7), "custom.scale": (5,),
    "cls_token": (1, 5),
}  # fmt: skip


def test_torch_layout_rules() -> None:
    guesses = infer_module_types(SHAPES, "torch")
    assert {name: guess.candidates for name, guess in guesses.items()} == {
        "bn.weight": ("BatchNorm",), "bn.bias": ("BatchNorm",),
        "bn.running_mean": ("BatchNorm",), "bn.running_var": ("BatchNorm",),
        "bn.num_batches_tracked": ("BatchNorm",),
        "burn_norm.gamma": ("LayerNorm",), "burn_norm.beta": ("LayerNorm",),
        "conv1.weight": ("Conv1d",), "conv2.weight": ("Conv2d",), "conv2.bias": ("Conv2d",),
        "conv3.weight": ("Conv3d",),
        "fc.weight": ("Linear",), "fc.bias": ("Linear",),
        "square.weight": ("Linear",), "square.bias": ("Linear",),
        "emb.weight": ("Linear", "Embedding"),
        "ln.weight": ("LayerNorm",), "ln.bias": ("LayerNorm",),
        "rms.weight": ("RmsNorm", "PRelu"),
        "custom.weight": (), "custom.scale": (),  # other tensors beside: a module of its own
        "cls_token": (),
    }  # fmt: skip
    assert guesses["fc.weight"].module_type == "Linear"
    assert guesses["emb.weight"].module_type is None  # ambiguous: no one type


def test_snapshots_are_inferred_by_their_names_and_shapes_without_being_read() -> None:
    def unread() -> Any:
        raise AssertionError("inference reads no data")

    snapshots = [
        TensorSnapshot(tuple(name.split(".")), _F32, shape, unread)
        for name, shape in SHAPES.items()
    ]
    assert infer_module_types(snapshots, "torch") == infer_module_types(SHAPES, "torch")


def test_a_linear_laid_out_the_other_way_is_a_misfit() -> None:
    shapes = {"fc.weight": (7, 5), "fc.bias": (5,)}  # Burn's [in, out]
    assert infer_module_types(shapes, "torch")["fc.weight"].misfit == "weight [7, 5] with bias [5]"
    assert infer_module_types(shapes, "burn")["fc.weight"] == ModuleGuess(("Linear",))
    assert infer_module_types(shapes, None)["fc.weight"] == ModuleGuess(("Linear",))


def _snapshot(name: str, shape: tuple[int, ...]) -> TensorSnapshot:
    return TensorSnapshot.from_array(name, np.zeros(shape, np.float32))


_F32 = _snapshot("x", ()).dtype


def test_an_ambiguity_half_precision_does_not_care_about_passes() -> None:
    snapshots = [_snapshot("emb.weight", (9, 5)), _snapshot("rms.weight", (5,))]
    owned = assign_module_types(snapshots, HalfPrecisionAdapter())
    assert [s.container for s in owned] == [("Linear",), ("RmsNorm",)]


def test_an_ambiguity_the_layout_cares_about_is_refused_unless_named() -> None:
    snapshots = [_snapshot("emb.weight", (9, 5)), _snapshot("head.weight", (2, 5))]
    with pytest.raises(ModuleTypeNeededError) as refused:
        assign_module_types(snapshots, PyTorchToBurnAdapter())
    assert "'emb.weight' (a 2-D weight with no bias: Linear or Embedding)" in str(refused.value)
    assert "PyTorchToBurnAdapter treats them differently" in str(refused.value)
    assert str(refused.value).endswith("(1 more: 'head.weight')")
    assert refused.value.tensors == ("emb.weight", "head.weight")
    assert refused.value.candidates == ("Linear", "Embedding") and not refused.value.misfit
    assert isinstance(refused.value, InvalidOptionError) and refused.value.option == "module_type"
    rules = {"emb": "Embedding", "head": "Linear"}
    owned = assign_module_types(snapshots, PyTorchToBurnAdapter(), rules)
    assert [s.container for s in owned] == [("Embedding",), ("Linear",)]


def test_the_last_rule_that_matches_wins_and_rules_are_checked() -> None:
    snapshots = [_snapshot("emb.weight", (9, 5))]
    rules = [
        ModuleTypeRule.from_regex("emb", "Embedding"),
        ModuleTypeRule.from_regex("^emb\\.", "Linear"),
    ]
    assert assign_module_types(snapshots, PyTorchToBurnAdapter(), rules)[0].container == ("Linear",)
    with pytest.raises(InvalidOptionError, match="regex"):
        assign_module_types(snapshots, PyTorchToBurnAdapter(), {"(": "Linear"})


def test_a_snapshot_that_names_its_module_keeps_it() -> None:
    named = TensorSnapshot.from_array(
        "emb.weight", np.zeros((9, 5), np.float32), ("Net", "Embedding")
    )
    owned = assign_module_types([named], PyTorchToBurnAdapter())
    assert owned[0].container == ("Net", "Embedding")


def test_a_misfit_is_refused_in_the_layout_the_adapter_reads() -> None:
    snapshots = [_snapshot("fc.weight", (7, 5)), _snapshot("fc.bias", (5,))]
    with pytest.raises(ModuleTypeNeededError) as refused:
        assign_module_types(snapshots, PyTorchToBurnAdapter())
    assert refused.value.misfit and refused.value.tensors == ("fc.weight", "fc.bias")
    assert "laid out the other way than PyTorchToBurnAdapter expects" in str(refused.value)
    owned = assign_module_types(snapshots, HalfPrecisionAdapter())  # no layout: either fits
    assert [s.container for s in owned] == [("Linear",), ("Linear",)]


def test_which_adapters_need_module_types() -> None:
    assert needs_module_types(PyTorchToBurnAdapter())
    assert needs_module_types(FloatCastAdapter.to("F16").chain(HalfPrecisionAdapter()))
    assert not needs_module_types(FloatCastAdapter.to("F16"))


# -- a model-free save and the command do one conversion --------------------------------------

FIXED_PARAM_ID = 0x0123_4567_89AB_CDEF


@pytest.fixture(autouse=True)
def _fixed_param_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Burnpack saves give each tensor a random param id; one value makes saves comparable."""
    monkeypatch.setattr(secrets, "randbits", lambda bits: FIXED_PARAM_ID)


def _model(**extra: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
    """A conv, a batch norm, a layer norm, a Linear and a class token, as torch lays them out."""
    rng = np.random.default_rng(3)

    def normal(*shape: int) -> np.ndarray[Any, Any]:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "conv.weight": normal(4, 3, 3, 3), "conv.bias": normal(4),
        "bn.weight": normal(4), "bn.bias": normal(4), "bn.running_mean": normal(4),
        "bn.running_var": np.abs(normal(4)), "bn.num_batches_tracked": np.array(7, np.int64),
        "ln.weight": normal(5), "ln.bias": normal(5),
        "fc.weight": normal(5, 7), "fc.bias": normal(5),
        "cls_token": normal(1, 5),
        **extra,
    }  # fmt: skip


def _source(tmp_path: Path, arrays: dict[str, np.ndarray[Any, Any]]) -> Path:
    path = tmp_path / "model.safetensors"
    write_file(path, [TensorEntry.from_array(n, a) for n, a in arrays.items()], {"format": "pt"})
    return path


def _convert(*args: object) -> tuple[int, str]:
    """``weightstore convert ARGS`` in this process (so that param ids stay fixed): its exit
    code and what it wrote to stderr."""
    errors = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
        code = main(["convert", *map(str, args), "--quiet"])
    return code, errors.getvalue()


@pytest.mark.parametrize(
    ("flags", "adapter", "extra"),
    [
        (["--to-burn"], PyTorchToBurnAdapter, {}),
        (["--half"], HalfPrecisionAdapter, {"emb.weight": np.ones((6, 5), np.float32)}),
        (["--to-burn", "--half"], lambda: PyTorchToBurnAdapter().chain(HalfPrecisionAdapter()), {}),
    ],
    ids=["to-burn", "half-with-an-ambiguity-it-ignores", "to-burn-and-half"],
)
def test_save_into_from_a_file_writes_the_bytes_convert_writes(
    tmp_path: Path, flags: list[str], adapter: Any, extra: dict[str, np.ndarray[Any, Any]]
) -> None:
    src = _source(tmp_path, _model(**extra))
    assert _convert(src, tmp_path / "cli.bpk", *flags) == (0, "")
    store = BurnpackStore.from_file(tmp_path / "library.bpk").with_to_adapter(adapter())
    assert save_into(SafetensorsStore.from_file(src), store) == str(tmp_path / "library.bpk")
    written = (tmp_path / "library.bpk").read_bytes()
    assert written == (tmp_path / "cli.bpk").read_bytes()
    reader = BurnpackReader.from_bytes(written)
    if "--to-burn" in flags:  # the conversion did happen: a Linear transposed, norms renamed
        assert tuple(reader.descriptor("fc.weight").shape) == (7, 5)
        assert "ln.gamma" in reader.names() and "bn.beta" in reader.names()
        assert tuple(reader.descriptor("cls_token").shape) == (1, 5)  # no module: as it was


def test_a_torch_state_dict_converts_like_its_file(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arrays = _model()
    src = _source(tmp_path, arrays)
    assert _convert(src, tmp_path / "cli.bpk", "--to-burn") == (0, "")
    state_dict = {name: torch.from_numpy(array.copy()) for name, array in sorted(arrays.items())}
    store = BurnpackStore.from_bytes().with_to_adapter(PyTorchToBurnAdapter())
    save_into(state_dict, store)
    assert store.get_bytes() == (tmp_path / "cli.bpk").read_bytes()


def test_an_ambiguous_name_is_refused_from_python_as_from_the_command(tmp_path: Path) -> None:
    src = _source(tmp_path, _model(**{"emb.weight": np.ones((6, 5), np.float32)}))
    code, stderr = _convert(src, tmp_path / "cli.bpk", "--to-burn")
    assert code == 2 and not (tmp_path / "cli.bpk").exists()
    assert stderr == (
        f"weightstore: error: {src}: cannot tell which module owns 'emb.weight' (a 2-D weight "
        "with no bias: Linear or Embedding), and --to-burn treats them differently; name it "
        "with --module-type 'PATTERN=TYPE'\n"
    )
    store = BurnpackStore.from_file(tmp_path / "library.bpk").with_to_adapter(
        PyTorchToBurnAdapter()
    )
    with pytest.raises(ModuleTypeNeededError) as refused:
        save_into(SafetensorsStore.from_file(src), store)
    assert str(refused.value) == (
        "cannot tell which module owns 'emb.weight' (a 2-D weight with no bias: Linear or "
        "Embedding), and PyTorchToBurnAdapter treats them differently; name it with "
        "assign_module_types(snapshots, adapter, {'PATTERN': 'TYPE'}) and save what it returns"
    )
    assert refused.value.tensors == ("emb.weight",) and not (tmp_path / "library.bpk").exists()


def test_types_named_from_python_convert_as_module_type_does(tmp_path: Path) -> None:
    src = _source(tmp_path, _model(**{"emb.weight": np.ones((6, 5), np.float32)}))
    done = _convert(src, tmp_path / "cli.bpk", "--to-burn", "--module-type", "^emb=Embedding")
    assert done == (0, "")
    adapter = PyTorchToBurnAdapter()
    snapshots = SafetensorsStore.from_file(src).get_all_snapshots().values()
    typed = assign_module_types(snapshots, adapter, {"^emb": "Embedding"})
    save_into(typed, BurnpackStore.from_file(tmp_path / "library.bpk").with_to_adapter(adapter))
    assert (tmp_path / "library.bpk").read_bytes() == (tmp_path / "cli.bpk").read_bytes()


def test_a_file_already_converted_is_refused_from_python_as_from_the_command(
    tmp_path: Path,
) -> None:
    src = _source(tmp_path, {"fc.weight": np.ones((7, 5), np.float32), "fc.bias": np.ones(5)})
    code, stderr = _convert(src, tmp_path / "cli.bpk", "--to-burn")
    expected = "'fc.bias' (weight [7, 5] with bias [5]) is a Linear laid out the other way"
    assert code == 2 and f"{expected} than --to-burn expects" in stderr
    store = BurnpackStore.from_bytes().with_to_adapter(PyTorchToBurnAdapter())
    with pytest.raises(ModuleTypeNeededError) as refused:
        save_into(SafetensorsStore.from_file(src), store)
    assert refused.value.misfit and refused.value.tensors == ("fc.bias", "fc.weight")
