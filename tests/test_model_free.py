"""Saves from sources that are no model: stores, readers, snapshots, state dicts.

Each source kind is saved into burnpack and SafeTensors, in memory and on disk, and must give
the bytes the same tensors give from a plain dict of arrays (in the source's order), with the
destination's builders applied the same way (filter, remapping, a float cast, metadata). A
source whose loaders count how many arrays are alive shows that a save holds one tensor at a
time. Also here: the ``format`` metadata pair (``pt`` from torch), module types inferred from
names and shapes for module-typed adapters (refused where they would act on a guess, and for a
NumPy dict, which names no modules), and the path a save returns.
"""

from __future__ import annotations

import dataclasses
import secrets
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import weightstore
from weightstore import (
    BurnpackStore,
    InvalidOptionError,
    ModuleSnapshot,
    PytorchStore,
    SafetensorsStore,
    Store,
    TensorSnapshot,
    collect,
    save_into,
)
from weightstore.adapters import (
    FloatCastAdapter,
    HalfPrecisionAdapter,
    PyTorchToBurnAdapter,
)
from weightstore.burnpack import BurnpackReader
from weightstore.dtypes import from_name
from weightstore.errors import ModuleTypeNeededError
from weightstore.safetensors import SafetensorsReader

STORE_TYPES = [BurnpackStore, SafetensorsStore]
FIXED_PARAM_ID = 0xA5A5_A5A5_A5A5_A5A5  # 8 bytes in CBOR, like a random one


@pytest.fixture(autouse=True)
def _fixed_param_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Burnpack saves give every tensor without a param id a random one (Burn writes one for
    each); one fixed value makes saves from different sources comparable byte for byte."""
    monkeypatch.setattr(secrets, "randbits", lambda bits: FIXED_PARAM_ID)


def _arrays() -> dict[str, np.ndarray[Any, Any]]:
    """The tensors every source holds, in a deliberately unsorted order."""
    rng = np.random.default_rng(7)
    return {
        "encoder.0.weight": rng.standard_normal((3, 4)).astype(np.float32),
        "encoder.0.bias": rng.standard_normal(3).astype(np.float32),
        "decoder.weight": rng.standard_normal((2, 3)).astype(np.float32),
        "steps": np.array(12, dtype=np.int64),
    }


# -- the source kinds -------------------------------------------------------------------------


@dataclasses.dataclass
class Source:
    """A source to save from, the names it yields in order, and the framework it declares."""

    value: Any
    order: list[str]
    framework: str | None = None


def _safetensors_file(tmp_path: Path, metadata: dict[str, str] | None = None) -> Path:
    path = tmp_path / "source.safetensors"
    store = SafetensorsStore.from_file(path).overwrite().clear_metadata()
    for key, value in (metadata or {}).items():
        store = store.with_metadata(key, value)
    save_into(_arrays(), store)
    return path


def _burnpack_bytes() -> bytes:
    store = BurnpackStore.from_bytes()
    save_into(_arrays(), store)
    return store.get_bytes()


def _pytorch_file(tmp_path: Path) -> Path:
    torch = pytest.importorskip("torch")
    path = tmp_path / "source.pt"
    torch.save({k: torch.from_numpy(v.copy()) for k, v in _arrays().items()}, path)
    return path


def _snapshot_list(tmp_path: Path) -> Source:
    arrays = _arrays()
    return Source([TensorSnapshot.from_array(k, v) for k, v in arrays.items()], list(arrays))


def _snapshot_generator(tmp_path: Path) -> Source:
    arrays = _arrays()
    return Source((TensorSnapshot.from_array(k, v) for k, v in arrays.items()), list(arrays))


def _snapshot_mapping(tmp_path: Path) -> Source:
    arrays = _arrays()  # the key names the tensor, whatever the snapshot was called
    return Source({k: TensorSnapshot.from_array("x", v) for k, v in arrays.items()}, list(arrays))


def _flat_numpy(tmp_path: Path) -> Source:
    arrays = _arrays()
    return Source(dict(arrays), list(arrays))


def _nested_mixed(tmp_path: Path) -> Source:
    arrays = _arrays()
    value = {
        "encoder": {"0": {"weight": TensorSnapshot.from_array("w", arrays["encoder.0.weight"]),
                          "bias": arrays["encoder.0.bias"]}},
        "decoder.weight": arrays["decoder.weight"],
        "steps": TensorSnapshot.from_array("steps", arrays["steps"]),
    }  # fmt: skip
    return Source(value, list(arrays))


def _torch_state_dict(tmp_path: Path) -> Source:
    torch = pytest.importorskip("torch")
    arrays = _arrays()
    return Source({k: torch.from_numpy(v.copy()) for k, v in arrays.items()}, list(arrays), "pt")


def _safetensors_store(tmp_path: Path) -> Source:
    return Source(SafetensorsStore.from_file(_safetensors_file(tmp_path)), sorted(_arrays()))


def _safetensors_store_pt(tmp_path: Path) -> Source:
    path = _safetensors_file(tmp_path, {"format": "pt"})
    return Source(SafetensorsStore.from_file(path), sorted(_arrays()), "pt")


def _burnpack_store(tmp_path: Path) -> Source:
    return Source(BurnpackStore.from_bytes(_burnpack_bytes()), sorted(_arrays()))


def _pytorch_store(tmp_path: Path) -> Source:
    return Source(PytorchStore.from_file(_pytorch_file(tmp_path)), sorted(_arrays()), "pt")


def _safetensors_reader(tmp_path: Path) -> Source:
    reader = SafetensorsReader.from_file(_safetensors_file(tmp_path))
    return Source(reader, reader.names_in_file_order())


def _burnpack_reader(tmp_path: Path) -> Source:
    reader = BurnpackReader.from_bytes(_burnpack_bytes())
    return Source(reader, reader.names_in_file_order())


def _pytorch_reader(tmp_path: Path) -> Source:
    from weightstore.pytorch_reader import PytorchReader

    reader = PytorchReader.from_file(_pytorch_file(tmp_path))
    return Source(reader, reader.names_in_file_order(), "pt")


KINDS: dict[str, Callable[[Path], Source]] = {
    "snapshot-list": _snapshot_list,
    "snapshot-generator": _snapshot_generator,
    "snapshot-mapping": _snapshot_mapping,
    "flat-numpy": _flat_numpy,
    "nested-mixed": _nested_mixed,
    "torch-state-dict": _torch_state_dict,
    "safetensors-store": _safetensors_store,
    "safetensors-store-pt": _safetensors_store_pt,
    "burnpack-store": _burnpack_store,
    "pytorch-store": _pytorch_store,
    "safetensors-reader": _safetensors_reader,
    "burnpack-reader": _burnpack_reader,
    "pytorch-reader": _pytorch_reader,
}


def _configured(store: Store, configure: Callable[[Store], Store], framework: str | None) -> Store:
    """`configure`'s store; for a source that declares a framework, the reference (a NumPy
    dict, which declares none) states it explicitly, so only the tensors are compared."""
    store = configure(store)
    declared = store.options.metadata.get("format") == "safetensors"
    if framework is not None and isinstance(store, SafetensorsStore) and declared:
        store = store.with_metadata("format", framework)
    return store


def _saved(source: object, store: Store) -> bytes:
    assert save_into(source, store) is None  # memory stores return no path
    return store.get_bytes()


def _reference(store_type: Any, source: Source, configure: Callable[[Store], Store]) -> bytes:
    arrays = _arrays()
    ordered = {name: arrays[name] for name in source.order}
    return _saved(ordered, _configured(store_type.from_bytes(), configure, source.framework))


# -- bytes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("store_type", STORE_TYPES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_bytes_equal_saving_the_same_tensors_from_a_dict(
    kind: str, store_type: Any, tmp_path: Path
) -> None:
    source = KINDS[kind](tmp_path)
    saved = _saved(source.value, store_type.from_bytes())
    assert saved == _reference(store_type, source, lambda store: store)
    assert store_type.from_bytes(saved).keys() == sorted(_arrays())


@pytest.mark.parametrize("store_type", STORE_TYPES)
@pytest.mark.parametrize("kind", ["safetensors-store", "torch-state-dict", "pytorch-reader"])
def test_file_destination_writes_the_same_bytes_and_returns_its_path(
    kind: str, store_type: Any, tmp_path: Path
) -> None:
    source = KINDS[kind](tmp_path)
    written = save_into(source.value, store_type.from_file(tmp_path / "out"))
    expected = tmp_path / ("out.bpk" if store_type is BurnpackStore else "out")
    assert written == str(expected)
    assert expected.read_bytes() == _reference(store_type, source, lambda store: store)


def test_torch_state_dict_saves_as_its_model_does() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    from_model, from_state = SafetensorsStore.from_bytes(), SafetensorsStore.from_bytes()
    save_into(model, from_model)
    save_into(model.state_dict(), from_state)
    assert from_model.get_bytes() == from_state.get_bytes()


# -- builders -----------------------------------------------------------------------------------

BUILDERS: dict[str, Callable[[Store], Store]] = {
    "filter": lambda store: store.with_regex(r"^encoder\."),
    "remap": lambda store: store.with_key_remapping(r"^encoder\.(\d+)", r"enc$1"),
    "f16": lambda store: store.with_to_adapter(FloatCastAdapter.to("F16")),
    "bf16": lambda store: store.with_to_adapter(FloatCastAdapter.to("BF16")),
    "metadata": lambda store: store.with_metadata("run", "7"),
    "all": lambda store: (
        store.with_regex(r"^encoder\.")
        .with_key_remapping(r"^encoder\.", "enc.")
        .with_to_adapter(FloatCastAdapter.to("BF16"))
        .with_metadata("run", "7")
    ),
}


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("store_type", STORE_TYPES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_builders_apply_as_for_a_dict(
    kind: str, store_type: Any, builder: str, tmp_path: Path
) -> None:
    configure = BUILDERS[builder]
    source = KINDS[kind](tmp_path)
    saved = _saved(source.value, _configured(store_type.from_bytes(), configure, None))
    assert saved == _reference(store_type, source, configure)


@pytest.mark.parametrize("store_type", STORE_TYPES)
@pytest.mark.parametrize("kind", ["safetensors-store", "torch-state-dict", "snapshot-list"])
def test_builders_give_what_they_say(kind: str, store_type: Any, tmp_path: Path) -> None:
    source = KINDS[kind](tmp_path)
    store = BUILDERS["all"](store_type.from_bytes())
    result = store_type.from_bytes(_saved(source.value, store))
    assert result.keys() == ["enc.0.bias", "enc.0.weight"]
    weight = result.get_tensor("enc.0.weight")
    assert weight is not None and weight.dtype == from_name("BF16")
    expected = _arrays()["encoder.0.weight"].astype(from_name("BF16").numpy)
    np.testing.assert_array_equal(weight.to_numpy(), expected)
    assert result.read_metadata()["run"] == "7"


@pytest.mark.parametrize("target", ["F16", "BF16"])
def test_a_float_cast_leaves_integers_alone(target: str) -> None:
    store = SafetensorsStore.from_bytes().with_to_adapter(FloatCastAdapter.to(target))
    result = SafetensorsStore.from_bytes(_saved(_snapshot_list(Path()).value, store))
    dtypes = {name: snapshot.dtype.name for name, snapshot in result.get_all_snapshots().items()}
    assert dtypes == {
        "decoder.weight": target, "encoder.0.bias": target, "encoder.0.weight": target,
        "steps": "I64",
    }  # fmt: skip


def test_a_source_stores_own_filter_does_not_apply_but_its_remapping_does() -> None:
    source = BurnpackStore.from_bytes(_burnpack_bytes()).with_regex("^decoder")
    renamed = source.with_key_remapping(r"^decoder\.", "head.")
    assert BurnpackStore.from_bytes(_saved(source, BurnpackStore.from_bytes())).keys() == sorted(
        _arrays()
    )
    assert "head.weight" in BurnpackStore.from_bytes(_saved(renamed, BurnpackStore.from_bytes()))


def test_a_pytorch_checkpoint_is_saved_under_the_names_its_store_shows(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "gapped.pt"
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))
    torch.save(model.state_dict(), path)
    renumbered = PytorchStore.from_file(path)  # Burn's default: contiguous list indices
    faithful = renumbered.map_indices_contiguous(False)
    for store in (renumbered, faithful):
        assert SafetensorsStore.from_bytes(_saved(store, SafetensorsStore.from_bytes())).keys() == (
            store.keys()
        )
    assert "2.weight" in faithful and "2.weight" not in renumbered


def test_dedupe_tied_finds_ties_in_a_detached_state_dict() -> None:
    torch = pytest.importorskip("torch")
    from tests.stores.models import TinyTransformer

    model = TinyTransformer()
    from_model = SafetensorsStore.from_bytes().dedupe_tied()
    from_state = SafetensorsStore.from_bytes().dedupe_tied()
    save_into(model, from_model)
    save_into(model.state_dict(), from_state)  # every name detached separately
    assert from_model.get_bytes() == from_state.get_bytes()
    assert "head.weight" not in SafetensorsStore.from_bytes(from_state.get_bytes())
    assert torch.equal(model.state_dict()["head.weight"], model.state_dict()["embed.weight"])


# -- streaming ----------------------------------------------------------------------------------


class Tracker:
    """Counts the arrays loaders have produced that are still alive, and the peak."""

    def __init__(self) -> None:
        self.alive = self.peak = self.reads = 0

    def produced(self, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        array = np.array(array, copy=True)  # a fresh array per read, as a file read gives
        self.alive += 1
        self.reads += 1
        self.peak = max(self.peak, self.alive)
        weakref.finalize(array, self._freed)
        return array

    def _freed(self) -> None:
        self.alive -= 1

    def counted(self, snapshot: TensorSnapshot) -> TensorSnapshot:
        load = snapshot.load
        return snapshot.replace(load=lambda: self.produced(load()))


class CountingReader:
    """A `TensorReader` over a real reader whose `get` goes through a `Tracker`."""

    def __init__(self, reader: Any, tracker: Tracker) -> None:
        self._reader, self._tracker = reader, tracker

    def names_in_file_order(self) -> list[str]:
        return list(self._reader.names_in_file_order())

    def descriptor(self, name: str) -> Any:
        return self._reader.descriptor(name)

    def get(self, name: str) -> np.ndarray[Any, Any]:
        return self._tracker.produced(self._reader.get(name))

    def metadata(self) -> dict[str, object]:
        return dict(self._reader.metadata())


class CountingStore:
    """Anything with ``get_all_snapshots()`` is saved as a store; this one counts reads."""

    def __init__(self, store: Store, tracker: Tracker) -> None:
        self._store, self._tracker = store, tracker

    def get_all_snapshots(self) -> dict[str, TensorSnapshot]:
        snapshots = self._store.get_all_snapshots()
        return {name: self._tracker.counted(s) for name, s in snapshots.items()}

    def read_metadata(self) -> dict[str, str]:
        return self._store.read_metadata()


def _counting_sources(tracker: Tracker, tmp_path: Path) -> dict[str, Any]:
    snapshots = [tracker.counted(s) for s in _snapshot_list(tmp_path).value]
    return {
        "snapshot-list": snapshots,
        "snapshot-generator": iter(snapshots),
        "snapshot-mapping": {s.full_path: s for s in snapshots},
        "store": CountingStore(SafetensorsStore.from_file(_safetensors_file(tmp_path)), tracker),
        "reader": CountingReader(SafetensorsReader.from_file(_safetensors_file(tmp_path)), tracker),
    }


@pytest.mark.parametrize("adapter", [None, FloatCastAdapter.to("F16")], ids=["plain", "f16"])
@pytest.mark.parametrize("destination", ["burnpack-file", "safetensors-file", "safetensors-bytes"])
@pytest.mark.parametrize(
    "kind", ["snapshot-list", "snapshot-generator", "snapshot-mapping", "store", "reader"]
)
def test_a_save_holds_one_tensor_at_a_time(
    kind: str, destination: str, adapter: Any, tmp_path: Path
) -> None:
    tracker = Tracker()
    source = _counting_sources(tracker, tmp_path)[kind]
    assert tracker.reads == 0
    stores: dict[str, Callable[[], Store]] = {
        "burnpack-file": lambda: BurnpackStore.from_file(tmp_path / "out"),
        "safetensors-file": lambda: SafetensorsStore.from_file(tmp_path / "out.safetensors"),
        "safetensors-bytes": SafetensorsStore.from_bytes,
    }
    store = stores[destination]()
    if adapter is not None:
        store = store.with_to_adapter(adapter)
    save_into(source, store)
    assert tracker.reads == len(_arrays())  # each tensor read once
    assert tracker.peak == 1  # and dropped before the next
    assert tracker.alive == 0


def test_collect_reads_nothing(tmp_path: Path) -> None:
    tracker = Tracker()
    for source in _counting_sources(tracker, tmp_path).values():
        collect(source, adapter=FloatCastAdapter.to("BF16"))
    assert tracker.reads == 0


def test_a_torch_state_dict_converts_one_tensor_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import weightstore.bridge._torch as torch_bridge

    tracker = Tracker()
    convert = torch_bridge.torch_to_array
    monkeypatch.setattr(torch_bridge, "torch_to_array", lambda t: tracker.produced(convert(t)))
    state = {f"layer{i}.weight": torch.randn(4, 3).t() for i in range(4)}  # not contiguous
    save_into(state, BurnpackStore.from_bytes().with_to_adapter(FloatCastAdapter.to("F16")))
    assert (tracker.reads, tracker.peak, tracker.alive) == (4, 1, 0)


# -- the format pair ----------------------------------------------------------------------------


def _format_of(source: object, store: Store) -> str | None:
    saved = type(store).from_bytes(_saved(source, store))
    return saved.read_metadata().get("format")


def test_torch_saves_say_pt_and_numpy_saves_keep_burns_pair(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(2, 2)
    assert _format_of(model, SafetensorsStore.from_bytes()) == "pt"
    assert _format_of(model.state_dict(), SafetensorsStore.from_bytes()) == "pt"
    assert _format_of(_arrays(), SafetensorsStore.from_bytes()) == "safetensors"
    assert _format_of(model, BurnpackStore.from_bytes()) == "burnpack"  # Burn's meaning
    for kind in sorted(KINDS):
        source = KINDS[kind](tmp_path)
        assert _format_of(source.value, SafetensorsStore.from_bytes()) == (
            source.framework or "safetensors"
        ), kind


def test_the_format_pair_can_be_dropped_or_set() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(2, 2)
    cleared = SafetensorsStore.from_bytes(
        _saved(model, SafetensorsStore.from_bytes().clear_metadata())
    )
    assert cleared.read_metadata() == {}
    for value in ("np", "safetensors", "pt"):  # an explicit pair is written as given
        assert (
            _format_of(model, SafetensorsStore.from_bytes().with_metadata("format", value)) == value
        )
    assert (
        _format_of(_arrays(), SafetensorsStore.from_bytes().with_metadata("format", "pt")) == "pt"
    )
    kept = SafetensorsStore.from_bytes().with_metadata("run", "1").with_regex("weight")
    assert _format_of(model, kept) == "pt"  # other builders keep the default's mark


def test_a_torch_save_is_what_safetensors_torch_writes() -> None:
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    store = SafetensorsStore.from_bytes().clear_metadata().with_metadata("format", "pt")
    expected = safetensors_torch.save(model.state_dict(), metadata={"format": "pt"})
    assert _saved(model, store) == expected
    loaded = safetensors_torch.load(_saved(model, SafetensorsStore.from_bytes()))
    assert sorted(loaded) == sorted(model.state_dict())


def test_the_default_pair_looks_like_a_plain_string() -> None:
    metadata = SafetensorsStore.from_bytes().options.metadata
    assert metadata["format"] == "safetensors" and repr(metadata["format"]) == "'safetensors'"


# -- module types -------------------------------------------------------------------------------

TYPED_ADAPTERS: dict[str, Callable[[], Any]] = {
    "pytorch-to-burn": PyTorchToBurnAdapter,
    "half": HalfPrecisionAdapter,
    "chained": lambda: FloatCastAdapter.to("F16").chain(PyTorchToBurnAdapter()),
}


MODEL_FREE_KINDS = sorted(kind for kind in KINDS if kind != "flat-numpy")  # a NumPy dict: a model


@pytest.mark.parametrize("adapter", sorted(TYPED_ADAPTERS))
def test_a_numpy_dict_names_no_modules_and_keeps_refusing(adapter: str, tmp_path: Path) -> None:
    store = BurnpackStore.from_file(tmp_path / "out").with_to_adapter(TYPED_ADAPTERS[adapter]())
    with pytest.raises(InvalidOptionError) as caught:
        save_into(_flat_numpy(tmp_path).value, store)
    assert caught.value.option == "to_adapter" and isinstance(caught.value, ValueError)
    assert not (tmp_path / "out.bpk").exists()


@pytest.mark.parametrize("adapter", ["pytorch-to-burn", "chained"])
@pytest.mark.parametrize("kind", MODEL_FREE_KINDS)
def test_an_owner_the_layout_cannot_settle_is_refused(
    kind: str, adapter: str, tmp_path: Path
) -> None:
    source = KINDS[kind](tmp_path)  # decoder.weight, 2-D with no bias: Linear or Embedding
    store = BurnpackStore.from_file(tmp_path / "out").with_to_adapter(TYPED_ADAPTERS[adapter]())
    with pytest.raises(ModuleTypeNeededError) as caught:
        save_into(source.value, store)
    assert caught.value.tensors == ("decoder.weight",) and caught.value.option == "module_type"
    assert "PyTorchToBurnAdapter treats them differently" in str(caught.value)
    assert not (tmp_path / "out.bpk").exists()


@pytest.mark.parametrize("kind", MODEL_FREE_KINDS)
def test_module_types_inferred_from_names_and_shapes_drive_half_precision(
    kind: str, tmp_path: Path
) -> None:
    store = BurnpackStore.from_bytes().with_to_adapter(HalfPrecisionAdapter())
    saved = BurnpackStore.from_bytes(_saved(KINDS[kind](tmp_path).value, store))
    dtypes = {name: s.dtype.name for name, s in saved.get_all_snapshots().items()}
    # encoder.0 is a Linear; decoder may be a Linear or an Embedding, halved alike
    assert dtypes == {
        "encoder.0.weight": "F16", "encoder.0.bias": "F16", "decoder.weight": "F16",
        "steps": "I64",
    }  # fmt: skip


def test_a_torch_model_keeps_its_layout_adapter() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    store = BurnpackStore.from_bytes().with_to_adapter(PyTorchToBurnAdapter())
    weight = BurnpackStore.from_bytes(_saved(model, store)).get_tensor("0.weight")
    assert weight is not None and weight.shape == (3, 2)  # transposed for Burn


def test_snapshots_that_name_their_modules_keep_the_layout_adapter() -> None:
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    snapshot = TensorSnapshot.from_array("fc.weight", weight, container=("Net", "Linear"))
    store = BurnpackStore.from_bytes().with_to_adapter(PyTorchToBurnAdapter())
    saved = BurnpackStore.from_bytes(_saved([snapshot], store)).get_tensor("fc.weight")
    assert saved is not None
    np.testing.assert_array_equal(saved.to_numpy(), weight.T)


def test_model_free_snapshots_carry_the_module_types_their_names_and_shapes_show(
    tmp_path: Path,
) -> None:
    for kind in ("safetensors-store", "safetensors-reader", "torch-state-dict"):
        snapshots = {s.full_path: s.container for s in collect(KINDS[kind](tmp_path).value)}
        assert snapshots == {
            "encoder.0.weight": ("Linear",), "encoder.0.bias": ("Linear",),
            "decoder.weight": ("Linear",),  # ambiguous: its first candidate
            "steps": (),  # no rule types it
        }, kind  # fmt: skip


# -- what a save returns, what it refuses ------------------------------------------------------


def test_save_into_returns_the_path_written(tmp_path: Path) -> None:
    arrays = _arrays()
    assert save_into(arrays, BurnpackStore.from_file(tmp_path / "m")) == str(tmp_path / "m.bpk")
    plain = BurnpackStore.from_file(tmp_path / "plain").auto_extension(False)
    assert save_into(arrays, plain) == str(tmp_path / "plain")
    named = SafetensorsStore.from_file(tmp_path / "m.safetensors")
    assert named.collect_from(arrays) == str(tmp_path / "m.safetensors")
    assert Store.from_file(tmp_path / "n.bpk").collect_from(arrays) == str(tmp_path / "n.bpk")
    assert save_into(arrays, BurnpackStore.from_bytes()) is None


def test_the_mixin_returns_the_path_written(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Net(ModuleSnapshot, torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

    assert Net().save_into(BurnpackStore.from_file(tmp_path / "net")) == str(tmp_path / "net.bpk")
    assert Net().save_into(SafetensorsStore.from_bytes()) is None


def _duplicate_snapshots() -> list[TensorSnapshot]:
    return [TensorSnapshot.from_array("a", np.ones(2)), TensorSnapshot.from_array("a", np.zeros(2))]


@pytest.mark.parametrize(
    "source",
    [
        42,
        "model.safetensors",
        [TensorSnapshot.from_array("a", np.ones(2)), np.ones(2)],
        {"a": np.ones(2), "b": TensorSnapshot.from_array("b", np.ones(2)), "c": "text"},
        {"a.b": TensorSnapshot.from_array("x", np.ones(2)), "a": {"b": np.ones(2)}},
        _duplicate_snapshots(),
        {1: TensorSnapshot.from_array("x", np.ones(2))},
    ],
    ids=["int", "str", "array-in-list", "text-value", "one-name-twice", "twice-in-list", "int-key"],
)
def test_what_is_no_source_is_refused_before_writing(source: object, tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError):
        save_into(source, SafetensorsStore.from_file(tmp_path / "out.safetensors"))
    assert not (tmp_path / "out.safetensors").exists()


def test_numpy_and_snapshot_sources_never_import_torch() -> None:
    code = (
        "import sys, numpy as np, weightstore as ws\n"
        "arrays = {'a.b': np.ones(2, np.float32)}\n"
        "snapshots = [ws.TensorSnapshot.from_array('c', np.ones(2))]\n"
        "for source in (arrays, snapshots, {'d': snapshots[0], 'e': np.ones(1)}):\n"
        "    ws.save_into(source, ws.SafetensorsStore.from_bytes())\n"
        "store = ws.BurnpackStore.from_bytes()\n"
        "ws.save_into(arrays, store)\n"
        "copy = ws.BurnpackStore.from_bytes(store.get_bytes())\n"
        "ws.save_into(copy, ws.BurnpackStore.from_bytes())\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def _iter_names(snapshots: Iterator[TensorSnapshot]) -> list[str]:
    return [s.full_path for s in snapshots]


def test_collect_keeps_each_sources_order(tmp_path: Path) -> None:
    for kind, factory in KINDS.items():
        source = factory(tmp_path)
        assert _iter_names(iter(collect(source.value))) == source.order, kind
    assert weightstore.collect is collect


def test_burnpack_param_ids_travel_from_a_burnpack_source() -> None:
    snapshots = [
        TensorSnapshot.from_array(name, array, param_id=index + 1)
        for index, (name, array) in enumerate(_arrays().items())
    ]
    source = BurnpackStore.from_bytes(_saved(snapshots, BurnpackStore.from_bytes()))
    copied = BurnpackStore.from_bytes(_saved(source, BurnpackStore.from_bytes()))
    ids = {name: s.param_id for name, s in copied.get_all_snapshots().items()}
    assert ids == {name: index + 1 for index, name in enumerate(_arrays())}
