"""Digests that travel with the file (docs/integrity.md): a save with `with_digests` writes one
``weightstore.digests`` metadata pair; a load, a `get`, a slice read and `get_bytes` check a
tensor's bytes before handing it out, and one flipped byte is caught by each."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from weightstore import (
    BurnpackStore,
    DigestError,
    DigestMismatchError,
    InvalidOptionError,
    SafetensorsStore,
    Store,
    open_reader,
)
from weightstore.io._digest import (
    ALGORITHMS,
    METADATA_KEY,
    DigestTable,
    default_algorithm,
    digest_of,
)

STORES = {"safetensors": SafetensorsStore, "burnpack": BurnpackStore}
SUFFIX = {"safetensors": ".safetensors", "burnpack": ".bpk"}


def _arrays() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    return {
        "enc.weight": rng.standard_normal((8, 6)).astype(np.float32),
        "enc.bias": rng.standard_normal(8).astype(np.float32),
        "steps": np.arange(5, dtype=np.int64),
    }


def _save(tmp_path: Path, fmt: str, algorithm: str | None = "sha256") -> Path:
    path = tmp_path / f"model{SUFFIX[fmt]}"
    STORES[fmt].from_file(path).with_digests(algorithm).collect_from(_arrays())
    return path


def _flip(path: Path, tensor: str, at: int = 0) -> None:
    """Change one byte of `tensor`'s stored data, nothing else."""
    with open_reader(path) as reader:
        offset = reader.data_start + reader.descriptor(tensor).data_offsets[0] + at
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _zeros() -> dict[str, np.ndarray[Any, Any]]:
    return {name: np.zeros_like(array) for name, array in _arrays().items()}


@pytest.mark.parametrize("fmt", STORES)
def test_a_save_writes_one_key_of_each_tensors_digest(tmp_path: Path, fmt: str) -> None:
    path = _save(tmp_path, fmt)
    with open_reader(path) as reader:
        value = reader.metadata()[METADATA_KEY]
    assert isinstance(value, str)
    decoded = json.loads(value)
    expected = {n: hashlib.sha256(a.tobytes()).hexdigest() for n, a in _arrays().items()}
    assert decoded == {"algorithm": "sha256", "tensors": expected}


@pytest.mark.parametrize("fmt", STORES)
def test_a_save_without_digests_writes_no_key(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"model{SUFFIX[fmt]}"
    STORES[fmt].from_file(path).collect_from(_arrays())
    with open_reader(path) as reader:
        assert METADATA_KEY not in reader.metadata()


@pytest.mark.parametrize("fmt", STORES)
def test_a_digest_file_loads(tmp_path: Path, fmt: str) -> None:
    model = _zeros()
    Store.from_file(_save(tmp_path, fmt)).apply_to(model)
    for name, array in _arrays().items():
        assert np.array_equal(model[name], array)


@pytest.mark.parametrize("fmt", STORES)
def test_a_flipped_byte_fails_the_load_and_leaves_the_model_unchanged(
    tmp_path: Path, fmt: str
) -> None:
    path = _save(tmp_path, fmt)
    _flip(path, "steps", at=3)
    model = _zeros()
    with pytest.raises(DigestMismatchError) as caught:
        Store.from_file(path).apply_to(model)
    err = caught.value
    assert (err.path, err.tensor, err.algorithm) == (str(path), "steps", "sha256")
    assert err.expected == hashlib.sha256(_arrays()["steps"].tobytes()).hexdigest()
    assert err.found != err.expected and len(err.found) == 64
    assert err.expected in str(err) and err.found in str(err)
    assert all(not array.any() for array in model.values())  # nothing was written


@pytest.mark.parametrize("fmt", STORES)
def test_verify_digests_off_loads_the_changed_bytes(tmp_path: Path, fmt: str) -> None:
    path = _save(tmp_path, fmt)
    _flip(path, "steps")
    model = _zeros()
    STORES[fmt].from_file(path).verify_digests(False).apply_to(model)
    assert model["steps"][0] == 1  # 0 with its lowest bit flipped


@pytest.mark.parametrize("fmt", STORES)
def test_get_get_bytes_and_a_snapshot_check_the_bytes(tmp_path: Path, fmt: str) -> None:
    path = _save(tmp_path, fmt)
    _flip(path, "enc.bias")
    with open_reader(path) as reader:
        with pytest.raises(DigestMismatchError):
            reader.get("enc.bias")
        with pytest.raises(DigestMismatchError):
            reader.get_bytes("enc.bias")
        assert np.array_equal(reader.get("enc.weight"), _arrays()["enc.weight"])
    store = STORES[fmt].from_file(path)
    snapshot = store.get_tensor("enc.bias")
    assert snapshot is not None
    with pytest.raises(DigestMismatchError):
        snapshot.to_numpy()


@pytest.mark.parametrize("fmt", STORES)
def test_a_slice_read_checks_the_whole_tensor_once(tmp_path: Path, fmt: str) -> None:
    path = _save(tmp_path, fmt)
    _flip(path, "enc.weight", at=4 * 6 * 7)  # in the last row, which the slice does not read
    with open_reader(path) as reader, pytest.raises(DigestMismatchError):
        reader.get_slice("enc.weight")[0:1]
    (tmp_path / "good").mkdir()
    with open_reader(_save(tmp_path / "good", fmt)) as reader:
        part = reader.get_slice("enc.weight")
        assert np.array_equal(part[1:3], _arrays()["enc.weight"][1:3])
        check = reader.digest_check()
        assert check is not None and "enc.weight" in check.checked


@pytest.mark.parametrize("fmt", STORES)
def test_verify_digests_lists_tensors_without_one(tmp_path: Path, fmt: str) -> None:
    path = _save(tmp_path, fmt)
    with open_reader(path) as reader:
        assert reader.verify_digests() == []
    plain = tmp_path / f"plain{SUFFIX[fmt]}"
    STORES[fmt].from_file(plain).collect_from(_arrays())
    with open_reader(plain) as reader:
        assert reader.verify_digests() == sorted(_arrays())


def test_a_file_digesting_some_tensors_names_the_rest(tmp_path: Path) -> None:
    from weightstore import SafetensorsWriter, TensorEntry
    from weightstore.io._digest import encode_digests

    arrays = _arrays()
    digests = {"steps": digest_of("sha256", arrays["steps"].tobytes())}
    entries = [TensorEntry.from_array(name, array) for name, array in arrays.items()]
    path = tmp_path / "some.safetensors"
    SafetensorsWriter(entries, {METADATA_KEY: encode_digests("sha256", digests)}).save(path)
    with open_reader(path) as reader:
        assert reader.verify_digests() == ["enc.bias", "enc.weight"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_round_trips(tmp_path: Path, algorithm: str) -> None:
    if algorithm == "xxh3_128":
        need("xxhash")
    if algorithm == "blake3":
        need("blake3")
    path = _save(tmp_path, "safetensors", algorithm)
    with open_reader(path) as reader:
        assert DigestTable.parse(reader.metadata()[METADATA_KEY], None).algorithm == algorithm
        assert reader.verify_digests() == []
    _flip(path, "steps")
    with pytest.raises(DigestMismatchError):
        Store.from_file(path).apply_to(_zeros())


def test_the_default_algorithm_is_xxh3_when_xxhash_is_installed(tmp_path: Path) -> None:
    need("xxhash")
    assert default_algorithm() == "xxh3_128"
    store = SafetensorsStore.from_file(tmp_path / "m.safetensors").with_digests()
    assert store.options.digests == "xxh3_128"


def test_an_unknown_algorithm_is_refused_at_the_builder(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="unknown digest algorithm 'md5'"):
        SafetensorsStore.from_file(tmp_path / "m.safetensors").with_digests("md5")


def test_a_digest_naming_an_unknown_algorithm_fails_typed(tmp_path: Path) -> None:
    from weightstore import SafetensorsWriter, TensorEntry

    entries = [TensorEntry.from_array("w", np.ones(3, np.float32))]
    path = tmp_path / "odd.safetensors"
    value = json.dumps({"algorithm": "md4", "tensors": {"w": "00"}})
    SafetensorsWriter(entries, {METADATA_KEY: value}).save(path)
    with open_reader(path) as reader, pytest.raises(DigestError, match="md4") as caught:
        reader.get("w")
    assert (caught.value.path, caught.value.tensor) == (str(path), "w")
    assert "verify_digests(False)" in str(caught.value)


@pytest.mark.parametrize(
    "value", ["not json", "[]", '{"tensors": {}}', '{"algorithm": "sha256", "tensors": {"w": 1}}']
)
def test_a_malformed_digest_value_fails_typed(tmp_path: Path, value: str) -> None:
    from weightstore import SafetensorsWriter, TensorEntry

    entries = [TensorEntry.from_array("w", np.ones(3, np.float32))]
    path = tmp_path / "bad.safetensors"
    SafetensorsWriter(entries, {METADATA_KEY: value}).save(path)
    with open_reader(path) as reader, pytest.raises(DigestError, match=METADATA_KEY):
        reader.get("w")
    model = {"w": np.zeros(3, np.float32)}
    SafetensorsStore.from_file(path).verify_digests(False).apply_to(model)  # off: read as is
    assert model["w"].all()


def test_a_resave_computes_its_own_digests_and_drops_stale_ones(tmp_path: Path) -> None:
    path = _save(tmp_path, "safetensors")
    renamed = tmp_path / "renamed.safetensors"
    source = SafetensorsStore.from_file(path)
    target = SafetensorsStore.from_file(renamed).with_key_remapping("^enc", "encoder")
    target = target.with_metadata(METADATA_KEY, source.read_metadata()[METADATA_KEY])
    target.collect_from(source)
    with open_reader(renamed) as reader:
        assert METADATA_KEY not in reader.metadata()  # the old file's digests are not carried
    target.with_digests("sha256").overwrite().collect_from(source)
    with open_reader(renamed) as reader:
        assert reader.verify_digests() == []
        assert "encoder.weight" in json.loads(reader.metadata()[METADATA_KEY])["tensors"]


def test_a_memory_store_carries_and_checks_digests() -> None:
    store = SafetensorsStore.from_bytes().with_digests("sha256")
    store.collect_from(_arrays())
    data = bytearray(store.get_bytes())
    model = _zeros()
    SafetensorsStore.from_bytes(bytes(data)).apply_to(model)
    assert np.array_equal(model["steps"], _arrays()["steps"])
    data[-1] ^= 0x01  # the last tensor's last byte
    with pytest.raises(DigestMismatchError):
        SafetensorsStore.from_bytes(bytes(data)).apply_to(_zeros())


def test_a_torch_model_is_unchanged_by_a_failed_digest_load(tmp_path: Path) -> None:
    torch = need("torch")
    from tests.stores.models import Mlp

    torch.manual_seed(0)
    saved = Mlp()
    path = tmp_path / "mlp.safetensors"
    SafetensorsStore.from_file(path).with_digests("sha256").collect_from(saved)
    _flip(path, "fc2.bias")
    target = Mlp()
    before = {name: value.clone() for name, value in target.state_dict().items()}
    with pytest.raises(DigestMismatchError, match=r"fc2\.bias"):
        SafetensorsStore.from_file(path).apply_to(target)
    for name, value in target.state_dict().items():
        assert torch.equal(value, before[name]), name
