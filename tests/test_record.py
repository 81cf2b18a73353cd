"""ModuleRecord: save, load, strictness, dtype policies, parameter ids, and what a failed load
says and leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cbor2
import numpy as np
import pytest

from weightstore import BurnpackStore, burnpack, load_from
from weightstore.errors import DestinationExistsError
from weightstore.record import ModuleRecord, into_record, load_record, try_load_record
from weightstore.stores import LoadFailedError


def _model(scale: float = 1.0) -> dict[str, Any]:
    return {
        "fc": {"weight": np.full((2, 3), scale, np.float32), "bias": np.full(2, scale, np.float32)},
        "steps": np.array(7, np.int64),
    }


def test_save_adds_extension_and_writes_burn_layout(tmp_path: Path) -> None:
    record = into_record(_model())
    assert len(record) == 3 and record.keys() == ["fc.weight", "fc.bias", "steps"]
    path = record.save(tmp_path / "ckpt")
    assert path == str(tmp_path / "ckpt.bpk")
    data = Path(path).read_bytes()
    top = cbor2.loads(data[10 : 10 + int.from_bytes(data[6:10], "little")])
    assert list(top) == ["tensors"]  # no metadata map, as Burn's ModuleRecord writes
    assert all("param_id" in d for d in top["tensors"].values())


def test_save_refuses_to_replace_a_file_unless_told(tmp_path: Path) -> None:
    # Burn's record save replaces the file; ours asks first, as every weightstore save does.
    path = into_record(_model(1.0)).save(tmp_path / "ckpt")
    before = Path(path).read_bytes()
    with pytest.raises(DestinationExistsError) as caught:
        into_record(_model(2.0)).save(tmp_path / "ckpt")
    assert caught.value.path == path and ".overwrite()" in str(caught.value)
    assert Path(path).read_bytes() == before  # untouched
    record = into_record(_model(2.0))
    assert not record.overwrite_file and record.overwrite().overwrite_file
    assert record.overwrite().overwrite(False) == record
    assert record.overwrite().save(tmp_path / "ckpt") == path
    assert ModuleRecord.load(path).snapshots[0].to_numpy()[0, 0] == 2.0


def test_round_trip_through_file_and_bytes(tmp_path: Path) -> None:
    source = into_record(_model(2.0))
    for loaded in (ModuleRecord.load(source.save(tmp_path / "r")),
                   ModuleRecord.from_bytes(source.into_bytes())):  # fmt: skip
        target = _model(0.0)
        result = load_record(target, loaded)
        assert result.applied == ["fc.weight", "fc.bias", "steps"]
        assert target["fc"]["weight"].tolist() == [[2.0] * 3] * 2
    assert ModuleRecord.load(tmp_path / "r").keys() == source.keys()


def test_record_keeps_values_at_creation() -> None:
    model = _model(1.0)
    record = into_record(model)
    model["fc"]["weight"][:] = 5.0
    target = _model(0.0)
    load_record(target, record)
    assert target["fc"]["weight"][0, 0] == 1.0


def test_strict_by_default_and_each_allowance() -> None:
    record = into_record({"fc": _model()["fc"]})  # no "steps"
    with pytest.raises(LoadFailedError) as missing:
        load_record(_model(0.0), record)
    assert missing.value.result.missing == [("steps", "dict")]
    assert load_record(_model(0.0), record.allow_partial()).missing == [("steps", "dict")]
    bigger = into_record({**_model(), "extra": np.zeros(1, np.float32)})
    with pytest.raises(LoadFailedError) as unused:
        load_record(_model(0.0), bigger)
    assert (unused.value.result.missing, unused.value.result.unused) == ([], ["extra"])
    assert load_record(_model(0.0), bigger.allow_unused()).unused == ["extra"]
    wrong = into_record({**_model(), "steps": np.zeros(3, np.int64)})
    with pytest.raises(LoadFailedError) as failed:
        load_record(_model(0.0), wrong)
    assert [(e.kind, e.path) for e in failed.value.result.errors] == [("shape_mismatch", "steps")]
    result = try_load_record(_model(0.0), wrong)
    assert [e.kind for e in result.errors] == ["shape_mismatch"]
    assert load_record(_model(0.0), wrong.strict_shapes(False)).errors


def test_validate_is_burns_name_for_strict_shapes() -> None:
    record = into_record(_model())
    assert record.check_shapes and not record.strict_shapes(False).check_shapes
    assert record.validate(False) == record.strict_shapes(False)
    assert record.strict_shapes(False).validate() == record


def test_dtype_policies() -> None:
    record = into_record({"w": np.array([1.5, 2.5], np.float32)})
    keep = {"w": np.zeros(2, np.float64)}
    load_record(keep, record)
    assert keep["w"].dtype == np.float32  # from_record: the record's dtype wins, as in Burn
    cast = {"w": np.zeros(2, np.int32)}
    load_record(cast, record.cast_to_module_dtype())
    assert cast["w"].dtype == np.int32 and cast["w"].tolist() == [1, 2]


def test_param_ids_survive_save_and_load(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from weightstore.bridge._torch import param_id_of

    torch.manual_seed(0)
    source, target = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    ids = {name: param_id_of(p) for name, p in source.named_parameters()}
    assert ids == {name: param_id_of(p) for name, p in source.named_parameters()}  # stable
    path = into_record(source).save(tmp_path / "lin")
    with burnpack.BurnpackReader.from_file(path) as pack:
        assert {n: pack.descriptor(n).param_id for n in pack.names()} == ids
    load_record(target, ModuleRecord.load(path))
    assert {name: param_id_of(p) for name, p in target.named_parameters()} == ids
    assert torch.equal(source.weight, target.weight)


def test_a_record_read_from_a_file_names_the_file(tmp_path: Path) -> None:
    path = into_record({"fc": _model()["fc"]}).save(tmp_path / "ckpt")
    record = ModuleRecord.load(tmp_path / "ckpt")
    assert record.source == path
    with pytest.raises(LoadFailedError) as caught:
        load_record(_model(0.0), record)
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path}: 1 model tensor is missing from the source;")
    assert f"│ Source: {path}" in str(caught.value)
    assert try_load_record(_model(0.0), record).source == path
    assert into_record(_model()).source is None  # made from a model: no file to name
    assert ModuleRecord.from_bytes(record.into_bytes()).source is None


def _bytes_of(model: dict[str, Any]) -> dict[str, bytes]:
    return {"fc.weight": model["fc"]["weight"].tobytes(), "fc.bias": model["fc"]["bias"].tobytes(),
            "steps": model["steps"].tobytes()}  # fmt: skip


@pytest.mark.parametrize(
    ("record", "failure"),
    [
        (into_record({"fc": _model(2.0)["fc"]}), "missing"),
        (into_record({**_model(2.0), "extra": np.zeros(1, np.float32)}), "unused"),
        (into_record({**_model(2.0), "steps": np.zeros(3, np.int64)}), "errors"),
    ],
)
def test_a_failed_strict_load_leaves_the_model_unchanged(
    record: ModuleRecord, failure: str
) -> None:
    model = _model(0.5)
    before = _bytes_of(model)
    with pytest.raises(LoadFailedError) as caught:
        load_record(model, record)
    assert caught.value.failure == failure and caught.value.result.refused == failure
    assert _bytes_of(model) == before  # byte for byte: nothing was written
    assert caught.value.result.applied == []
    assert "nothing was written, the model is unchanged" in str(caught.value)


def test_each_failure_names_the_record_call_that_fixes_it() -> None:
    partial = into_record({"fc": _model()["fc"]})
    with pytest.raises(LoadFailedError, match=r"record\.allow_partial\(True\)"):
        load_record(_model(0.0), partial)
    extra = into_record({**_model(), "extra": np.zeros(1, np.float32)})
    with pytest.raises(LoadFailedError, match=r"record\.allow_unused\(True\) to ignore them"):
        load_record(_model(0.0), extra)
    wrong = into_record({**_model(), "steps": np.zeros(3, np.int64)})
    with pytest.raises(LoadFailedError, match=r"leave this tensor unloaded"):
        load_record(_model(0.0), wrong)
    narrow = into_record({"w": np.ones(2, np.float32)}).with_dtype_policy("exact")
    with pytest.raises(LoadFailedError, match=r"pass adapter=HalfPrecisionAdapter\(\) to"):
        load_record({"w": np.zeros(2, np.float16)}, narrow)


def test_a_record_under_a_prefix_loads_nothing_and_says_how_to_rename(tmp_path: Path) -> None:
    path = into_record({"module": _model(3.0)}).save(tmp_path / "wrapped")
    record = ModuleRecord.load(path).allow_partial().allow_unused()
    model = _model(0.0)
    with pytest.raises(LoadFailedError) as caught:
        load_record(model, record)  # no allowance accepts a load that loads nothing
    error = caught.value
    assert error.failure == "nothing_loaded" and error.result.refused == "nothing_loaded"
    fix = f'BurnpackStore.from_file({path!r}).with_key_remapping(r"^module\\.", "")'
    assert fix in error.fix and "no allowance accepts a load that loads nothing" in error.fix
    result = load_from(model, BurnpackStore.from_file(path).with_key_remapping(r"^module\.", ""))
    assert result.is_success() and model["fc"]["weight"][0, 0] == 3.0


# The immutable-record idiom (`weightstore.base._record`) every value class is declared with.

import ast  # noqa: E402
import pickle  # noqa: E402

from weightstore.base._record import Record, ValueRecord, field  # noqa: E402


class _Span(ValueRecord):
    start: int
    stop: int = 10
    note: str = field(default="", compare=False)


class _Checked(Record):
    low: int
    high: int
    width: int = field(init=False)

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"{self.low} > {self.high}")
        self._set("width", self.high - self.low)


def test_a_record_takes_fields_by_position_or_keyword_with_defaults() -> None:
    assert (_Span(1).start, _Span(1).stop, _Span(1).note) == (1, 10, "")
    assert _Span(1, 2, "x") == _Span(start=1, note="y", stop=2)
    assert repr(_Span(1, note="x")) == "_Span(start=1, stop=10, note='x')"
    assert _Span.__slots__ == ("start", "stop", "note") and not hasattr(_Span(1), "__dict__")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: _Span(), r"_Span\(\) missing required argument 'start'"),
        (lambda: _Span(1, 2, "x", 4), r"takes 3 positional arguments but 4 were given"),
        (lambda: _Span(1, colour="red"), r"got an unexpected argument 'colour'"),
        (lambda: _Span(1, start=2), r"got multiple values for argument 'start'"),
        (lambda: _Checked(1, 2, 3), r"takes 2 positional arguments but 3 were given"),
    ],
)
def test_a_wrong_call_says_which_argument(call: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call()


def test_a_record_is_immutable_and_replace_makes_a_copy() -> None:
    span = _Span(1)
    with pytest.raises(AttributeError, match="cannot assign to field 'start'"):
        span.start = 2  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot delete field 'stop'"):
        del span.stop  # type: ignore[misc]
    assert span.replace(stop=3) == _Span(1, 3) and span.stop == 10
    with pytest.raises(TypeError, match="no field 'colour'"):
        span.replace(colour="red")


def test_value_records_compare_and_hash_by_compared_fields() -> None:
    assert _Span(1, note="a") == _Span(1, note="b")  # note is compare=False
    assert hash(_Span(1, note="a")) == hash(_Span(1, note="b"))
    assert _Span(1) != _Span(2) and len({_Span(1), _Span(1), _Span(2)}) == 2
    assert _Checked(1, 2) != _Checked(1, 2)  # a plain Record compares by identity


def test_post_init_checks_and_derives_also_on_replace_and_survives_pickling() -> None:
    checked = _Checked(2, 5)
    assert checked.width == 3 and repr(checked) == "_Checked(low=2, high=5)"
    assert checked.replace(high=9).width == 7
    with pytest.raises(ValueError, match="6 > 5"):
        checked.replace(low=6)
    copy = pickle.loads(pickle.dumps(checked))
    assert (copy.low, copy.high, copy.width) == (2, 5, 3)
    assert pickle.loads(pickle.dumps(_Span(1, 2, "x"))) == _Span(1, 2)


def test_a_field_without_default_cannot_follow_one_with_a_default() -> None:
    with pytest.raises(TypeError, match="field 'b' without a default follows 'a'"):

        class _Bad(Record):
            a: int = 0
            b: int


SRC = Path(__file__).parents[1] / "src" / "weightstore"
ALLOWED_HAND_ROLLED: set[tuple[str, str]] = set()  # none: every value class is a record


def _frozen_dataclass(decorator: ast.expr) -> bool:
    if not isinstance(decorator, ast.Call):
        return False
    name = ast.unparse(decorator.func)
    frozen = any(k.arg == "frozen" and ast.unparse(k.value) == "True" for k in decorator.keywords)
    return name in ("dataclass", "dataclasses.dataclass") and frozen


def _refuses_assignment(node: ast.ClassDef) -> bool:
    return any(
        isinstance(item, ast.FunctionDef)
        and item.name == "__setattr__"
        and any(isinstance(stmt, ast.Raise) for stmt in ast.walk(item))
        for item in node.body
    )


def _slots_set_by_object_setattr(node: ast.ClassDef) -> bool:
    """A slotted class that writes its own fields with ``object.__setattr__``: a record
    written by hand."""
    slotted = any(
        isinstance(item, (ast.Assign, ast.AnnAssign))
        and "__slots__"
        in ast.unparse(item.targets[0] if isinstance(item, ast.Assign) else item.target)
        for item in node.body
    )
    return slotted and "object.__setattr__" in ast.unparse(node)


def test_every_immutable_value_class_is_a_record() -> None:
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative == "base/_record.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and (
                any(_frozen_dataclass(d) for d in node.decorator_list)
                or _refuses_assignment(node)
                or _slots_set_by_object_setattr(node)
            ):
                found.add((relative, node.name))
    assert found - ALLOWED_HAND_ROLLED == set()  # declare it as a Record/ValueRecord
    assert ALLOWED_HAND_ROLLED - found == set()  # converted: take it off the list
