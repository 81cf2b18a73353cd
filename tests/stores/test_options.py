"""Store builders, defaults, filters, remapping, metadata, direct access and the load report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import (
    BurnpackStore,
    IdentityAdapter,
    KeyRemapper,
    LoadFailedError,
    PathFilter,
    PytorchStore,
    SafetensorsStore,
    __version__,
    apply,
    collect,
    load_from,
    save_into,
    to_data,
)
from weightstore.errors import (
    DestinationExistsError,
    InvalidOptionError,
    RemapCollisionError,
)


def _model() -> dict[str, Any]:
    rng = np.random.default_rng(3)
    return {
        "encoder": {
            "0": {"weight": rng.standard_normal((2, 3)).astype(np.float32)},
            "1": {"weight": rng.standard_normal((2, 2)).astype(np.float32)},
        },
        "decoder": {
            "weight": rng.standard_normal((3, 2)).astype(np.float32),
            "bias": rng.standard_normal(3).astype(np.float32),
        },
    }


def _zeros_like(model: dict[str, Any]) -> dict[str, Any]:
    return {
        k: _zeros_like(v) if isinstance(v, dict) else np.zeros_like(v) for k, v in model.items()
    }


def _saved(store: Any, model: dict[str, Any] | None = None) -> bytes:
    save_into(model or _model(), store)
    data: bytes = store.get_bytes()
    return data


@pytest.fixture(params=[BurnpackStore, SafetensorsStore])
def store_type(request: pytest.FixtureRequest) -> Any:
    return request.param


def test_defaults() -> None:
    for store in (BurnpackStore.from_bytes(), SafetensorsStore.from_bytes()):
        options = store.options
        assert options.filter.is_empty and options.remapper.is_empty
        assert (options.allow_partial, options.validate, options.overwrite) == (False, True, False)
        assert options.from_adapter is None and options.to_adapter is None
        assert options.map_indices_contiguous is False and options.skip_enum_variants is False
        assert options.metadata["producer"] == "weightstore"
        assert options.metadata["version"] == __version__
    assert BurnpackStore.from_file("x").options.auto_extension is True
    pytorch = PytorchStore.from_file("x.pt").options
    assert pytorch.map_indices_contiguous is True and pytorch.skip_enum_variants is True
    assert pytorch.top_level_key is None


def test_builders_return_new_stores() -> None:
    base = BurnpackStore.from_bytes()
    partial = base.allow_partial()
    assert partial.options.allow_partial and not base.options.allow_partial
    assert base.validate(False).options.validate is False
    assert base.overwrite().options.overwrite is True
    assert base.auto_extension(False).options.auto_extension is False
    assert base.skip_enum_variants().options.skip_enum_variants is True
    assert base.map_indices_contiguous().options.map_indices_contiguous is True


def test_an_option_the_format_cannot_honour_is_refused_at_the_builder() -> None:
    # Each was accepted and silently ignored before the stores declared their options.
    refused = [
        (lambda: BurnpackStore.from_bytes().with_top_level_key("m"), "top_level_key", "burnpack"),
        (lambda: SafetensorsStore.from_bytes().auto_extension(False), "auto_extension",
         "safetensors"),
        (lambda: PytorchStore.from_file("x.pt").overwrite(), "overwrite", "pytorch"),
        (lambda: PytorchStore.from_file("x.pt").with_metadata("k", "v"), "metadata", "pytorch"),
        (lambda: PytorchStore.from_file("x.pt").with_to_adapter(IdentityAdapter()), "to_adapter",
         "pytorch"),
    ]  # fmt: skip
    for build, option, format_name in refused:
        with pytest.raises(InvalidOptionError) as caught:
            build()
        assert (caught.value.option, caught.value.format) == (option, format_name)
    assert PytorchStore.from_file("x.pt").with_top_level_key("m").options.top_level_key == "m"


@pytest.mark.parametrize(
    ("old", "new", "value"),
    [("metadata", "with_metadata", ("a", "1")), ("max_shard_size", "with_max_shard_size", ("3KB",)),
     ("variant", "with_variant", ("fp16",))],
)  # fmt: skip
def test_old_builder_spellings_warn_at_the_caller_and_still_work(
    old: str, new: str, value: tuple[str, ...]
) -> None:
    store = SafetensorsStore.from_file("ckpt")
    with pytest.warns(DeprecationWarning, match=new) as caught:
        by_old = getattr(store, old)(*value)
    assert caught[0].filename == __file__  # stacklevel: the caller's line, not the store's
    assert by_old.options == getattr(store, new)(*value).options != store.options


def test_invalid_regex_raises_at_the_builder() -> None:
    with pytest.raises(InvalidOptionError):
        BurnpackStore.from_bytes().with_regex("(unclosed")
    with pytest.raises(InvalidOptionError):
        SafetensorsStore.from_bytes().with_key_remapping("[", "x")
    with pytest.raises(InvalidOptionError):
        BurnpackStore.from_bytes().map_indices_contiguous_except("(")


def test_metadata_defaults_pairs_and_clear(store_type: Any) -> None:
    store = store_type.from_bytes().with_metadata("run", "7")
    saved = store_type.from_bytes(_saved(store))
    assert saved.read_metadata() == {
        "format": store_type.format_name, "producer": "weightstore",
        "version": __version__, "run": "7",
    }  # fmt: skip
    cleared = store_type.from_bytes(_saved(store_type.from_bytes().clear_metadata()))
    assert cleared.read_metadata() == {}
    with pytest.raises(InvalidOptionError):
        store_type.from_bytes().with_metadata("k", 3)


def test_filter_on_save(store_type: Any) -> None:
    data = _saved(store_type.from_bytes().with_regex(r"^encoder\."))
    assert store_type.from_bytes(data).keys() == ["encoder.0.weight", "encoder.1.weight"]
    data = _saved(store_type.from_bytes().with_full_path("decoder.bias"))
    assert store_type.from_bytes(data).keys() == ["decoder.bias"]
    by_predicate = store_type.from_bytes().with_predicate(lambda p, c: p.endswith("weight"))
    assert "decoder.bias" not in store_type.from_bytes(_saved(by_predicate))


def test_filter_on_load_skips_and_reports(store_type: Any) -> None:
    data = _saved(store_type.from_bytes())
    target = _zeros_like(_model())
    result = load_from(target, store_type.from_bytes(data).with_regex("^decoder"))
    assert sorted(result.applied) == ["decoder.bias", "decoder.weight"]
    assert result.skipped == ["encoder.0.weight", "encoder.1.weight"]
    assert not result.missing and not result.unused
    assert not target["encoder"]["0"]["weight"].any()


def test_empty_filter_means_no_filter(store_type: Any) -> None:
    data = _saved(store_type.from_bytes().filter(PathFilter()))
    assert len(store_type.from_bytes(data).keys()) == 4


def test_missing_tensors_raise_with_summary_unless_partial(store_type: Any) -> None:
    data = _saved(store_type.from_bytes().with_regex("^decoder"))
    target = _zeros_like(_model())
    with pytest.raises(LoadFailedError) as caught:
        load_from(target, store_type.from_bytes(data))
    message = str(caught.value)
    assert "Missing in source:          2 tensors" in message
    assert "encoder.0.weight" in message and ".allow_partial(True)" in message
    assert caught.value.result.missing == [("encoder.0.weight", "dict"),
                                           ("encoder.1.weight", "dict")]  # fmt: skip
    result = load_from(target, store_type.from_bytes(data).allow_partial())
    assert sorted(result.applied) == ["decoder.bias", "decoder.weight"]
    assert [path for path, _ in result.missing] == ["encoder.0.weight", "encoder.1.weight"]


def test_unused_tensors_never_fail_a_load(store_type: Any) -> None:
    data = _saved(store_type.from_bytes())
    target = {"decoder": {"bias": np.zeros(3, np.float32)}}
    result = load_from(target, store_type.from_bytes(data))
    assert result.applied == ["decoder.bias"]
    assert result.unused == ["decoder.weight", "encoder.0.weight", "encoder.1.weight"]


def test_shape_mismatch_raises_unless_validate_off(store_type: Any) -> None:
    data = _saved(store_type.from_bytes())
    target = _zeros_like(_model())
    target["decoder"]["bias"] = np.zeros(5, np.float32)
    with pytest.raises(LoadFailedError) as caught:
        load_from(target, store_type.from_bytes(data))
    (error,) = caught.value.result.errors
    assert (error.kind, error.path) == ("shape_mismatch", "decoder.bias")
    result = load_from(target, store_type.from_bytes(data).validate(False))
    assert [e.path for e in result.errors] == ["decoder.bias"]
    assert not target["decoder"]["bias"].any()  # left untouched
    assert "decoder.weight" in result.applied


def test_exact_dtype_conversions_load_and_lossy_ones_are_errors(store_type: Any) -> None:
    source = {"h": np.array([0.5, 1.5], np.float16), "i": np.array([1, 2], np.int32),
              "ok": np.array([3.0], np.float32)}  # fmt: skip
    data = _saved(store_type.from_bytes(), source)
    widened = {"h": np.zeros(2, np.float32), "i": np.zeros(2, np.int64), "ok": np.zeros(1)}
    assert sorted(load_from(widened, store_type.from_bytes(data)).applied) == ["h", "i", "ok"]
    assert widened["h"].tolist() == [0.5, 1.5] and widened["i"].dtype == np.int64
    # One tensor still loads: a load that writes nothing at all is refused outright.
    narrowed = {"h": np.zeros(2, np.int8), "i": np.zeros(2, np.int16),
                "ok": np.zeros(1, np.float32)}  # fmt: skip
    result = load_from(narrowed, store_type.from_bytes(data).validate(False))
    assert sorted((e.kind, e.path) for e in result.errors) == [
        ("dtype_mismatch", "h"), ("dtype_mismatch", "i")
    ]  # fmt: skip
    assert result.applied == ["ok"] and narrowed["ok"].tolist() == [3.0]


def test_remapping_applies_on_save_and_load(store_type: Any) -> None:
    data = _saved(store_type.from_bytes().with_key_remapping(r"^decoder\.", "head."))
    assert "head.weight" in store_type.from_bytes(data)
    target = _zeros_like(_model())
    store = store_type.from_bytes(data).with_key_remapping(r"^head\.(\w+)$", r"decoder.$1")
    result = load_from(target, store)
    assert sorted(result.applied) == sorted(
        ["decoder.bias", "decoder.weight", "encoder.0.weight", "encoder.1.weight"]
    )


def test_remap_chain_and_collision(store_type: Any) -> None:
    data = _saved(store_type.from_bytes())
    remapper = KeyRemapper().add_pattern(r"^encoder\.", "enc.").add_pattern(r"\.weight$", ".w")
    store = store_type.from_bytes(data).remap(remapper)
    assert store.keys() == ["decoder.bias", "decoder.w", "enc.0.w", "enc.1.w"]
    colliding = store_type.from_bytes(data).with_key_remapping(r"\.\d\.", ".x.")
    with pytest.raises(RemapCollisionError):
        colliding.keys()


def test_contiguous_index_mapping_on_load(store_type: Any) -> None:
    gappy = {"fc": {"0": {"w": np.ones(2, np.float32)}, "2": {"w": np.full(2, 2, np.float32)}}}
    data = _saved(store_type.from_bytes(), gappy)
    target = {"fc": {"0": {"w": np.zeros(2, np.float32)}, "1": {"w": np.zeros(2, np.float32)}}}
    plain = load_from(target, store_type.from_bytes(data).allow_partial())
    assert plain.missing == [("fc.1.w", "dict")] and plain.unused == ["fc.2.w"]
    mapped = load_from(target, store_type.from_bytes(data).map_indices_contiguous())
    assert sorted(mapped.applied) == ["fc.0.w", "fc.1.w"]
    assert target["fc"]["1"]["w"].tolist() == [2.0, 2.0]


def test_direct_access(store_type: Any) -> None:
    store = store_type.from_bytes(_saved(store_type.from_bytes()))
    assert store.keys() == sorted(store.keys())
    snapshot = store.get_tensor("decoder.bias")
    assert snapshot is not None and snapshot.shape == (3,)
    np.testing.assert_array_equal(to_data(snapshot), _model()["decoder"]["bias"])
    assert store.get_tensor("nope") is None
    assert set(store.get_all_snapshots()) == set(store.keys())


def test_to_torch() -> None:
    torch = pytest.importorskip("torch")
    from weightstore import to_torch

    store = BurnpackStore.from_bytes(_saved(BurnpackStore.from_bytes()))
    snapshot = store.get_tensor("decoder.weight")
    assert snapshot is not None
    tensor = to_torch(snapshot)
    assert tensor.dtype == torch.float32 and tuple(tensor.shape) == (3, 2)
    assert np.array_equal(tensor.numpy(), _model()["decoder"]["weight"])


def test_file_overwrite_protection(tmp_path: Path, store_type: Any) -> None:
    path = tmp_path / f"m.{store_type.format_name}"
    save_into(_model(), store_type.from_file(path))
    with pytest.raises(DestinationExistsError):
        save_into(_model(), store_type.from_file(path))
    save_into(_model(), store_type.from_file(path).overwrite())


def test_burnpack_auto_extension(tmp_path: Path) -> None:
    save_into(_model(), BurnpackStore.from_file(tmp_path / "model"))
    assert (tmp_path / "model.bpk").exists()
    save_into(_model(), BurnpackStore.from_file(tmp_path / "raw").auto_extension(False))
    assert (tmp_path / "raw").exists()


def test_burnpack_param_ids_round_trip() -> None:
    data = _saved(BurnpackStore.from_bytes())
    store = BurnpackStore.from_bytes(data)
    ids = {name: s.param_id for name, s in store.get_all_snapshots().items()}
    assert all(isinstance(i, int) and 0 <= i < 2**64 for i in ids.values())
    assert len(set(ids.values())) == len(ids)


def test_pytorch_store_is_load_only() -> None:
    with pytest.raises(InvalidOptionError, match="not supported"):
        save_into(_model(), PytorchStore.from_file("x.pt"))


def test_model_surgery_between_models() -> None:
    donor = _model()
    target = _zeros_like(_model())
    snapshots = collect(donor, PathFilter().with_regex("^encoder"))
    result = apply(target, snapshots, PathFilter().with_full_path("encoder.1.weight"))
    assert result.applied == ["encoder.1.weight"]
    # Excluded by the filter is "skipped" whether or not the source has the tensor.
    assert result.skipped == ["decoder.bias", "decoder.weight", "encoder.0.weight"]
    assert result.missing == []
    np.testing.assert_array_equal(target["encoder"]["1"]["weight"], donor["encoder"]["1"]["weight"])
    assert not target["encoder"]["0"]["weight"].any()


def test_contiguous_mapping_except_keeps_matched_lists(store_type: Any) -> None:
    gappy = {
        "fc": {"0": {"w": np.ones(1, np.float32)}, "2": {"w": np.full(1, 2, np.float32)}},
        "keep": {"0": {"w": np.ones(1, np.float32)}, "3": {"w": np.full(1, 3, np.float32)}},
    }
    store = store_type.from_bytes(_saved(store_type.from_bytes(), gappy))
    assert store.map_indices_contiguous_except(r"^keep$").keys() == [
        "fc.0.w", "fc.1.w", "keep.0.w", "keep.3.w"
    ]  # fmt: skip
