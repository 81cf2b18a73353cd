"""Digests in sharded sets (docs/integrity.md): every shard carries its tensors' digests, the
index every shard file's (SHA-256 of a file is the Hub's LFS oid) and, when asked, every
tensor's; the set still loads with huggingface_hub and transformers, and a changed byte in
a shard fails our load, `get` and `verify_digests` alike."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from weightstore import BurnpackStore, DigestMismatchError, SafetensorsStore, open_reader
from weightstore.io._digest import METADATA_KEY

INDEX = "model.safetensors.index.json"


def _arrays() -> dict[str, np.ndarray[Any, Any]]:
    return {f"layer{i}.weight": np.full((32, 32), i, np.float32) for i in range(4)}


def _save(directory: Path, *, index_tensors: bool = False) -> dict[str, Any]:
    store = SafetensorsStore.from_file(directory).with_max_shard_size(5000)
    store.with_digests("sha256", index_tensors=index_tensors).collect_from(_arrays())
    index: dict[str, Any] = json.loads((directory / INDEX).read_text())
    return index


def _flip_tensor(path: Path, tensor: str) -> None:
    with open_reader(path) as reader:
        offset = reader.data_start + reader.descriptor(tensor).data_offsets[0]
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_the_index_lists_every_shard_files_sha256(tmp_path: Path) -> None:
    index = _save(tmp_path)
    digests = json.loads(index["metadata"][METADATA_KEY])
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) == 4 and digests["algorithm"] == "sha256"
    assert digests["files"] == {
        name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in shards
    }
    assert "tensors" not in digests


def test_the_index_lists_tensor_digests_when_asked(tmp_path: Path) -> None:
    index = _save(tmp_path, index_tensors=True)
    tensors = json.loads(index["metadata"][METADATA_KEY])["tensors"]
    assert tensors == {n: hashlib.sha256(a.tobytes()).hexdigest() for n, a in _arrays().items()}


def test_every_shard_carries_its_own_tensors_digests(tmp_path: Path) -> None:
    index = _save(tmp_path)
    for name in sorted(set(index["weight_map"].values())):
        with open_reader(tmp_path / name) as shard:
            carried = json.loads(shard.metadata()[METADATA_KEY])["tensors"]
            assert sorted(carried) == shard.names()


def test_a_one_shard_set_is_a_digest_carrying_file(tmp_path: Path) -> None:
    store = SafetensorsStore.from_file(tmp_path).with_max_shard_size("1MB")
    store.with_digests("sha256").collect_from(_arrays())
    assert not (tmp_path / INDEX).exists()
    with open_reader(tmp_path / "model.safetensors") as reader:
        assert reader.verify_digests() == []


def test_a_changed_shard_byte_fails_load_get_and_verify(tmp_path: Path) -> None:
    index = _save(tmp_path)
    shard = tmp_path / index["weight_map"]["layer2.weight"]
    _flip_tensor(shard, "layer2.weight")
    model = {name: np.zeros_like(array) for name, array in _arrays().items()}
    with pytest.raises(DigestMismatchError) as caught:
        SafetensorsStore.from_file(tmp_path).apply_to(model)
    assert caught.value.tensor == "layer2.weight" and caught.value.path == str(shard)
    assert all(not array.any() for array in model.values())
    with open_reader(tmp_path) as reader, pytest.raises(DigestMismatchError):
        reader.get("layer2.weight")
    with open_reader(tmp_path) as reader, pytest.raises(DigestMismatchError):
        reader.verify_digests()
    SafetensorsStore.from_file(tmp_path).verify_digests(False).apply_to(model)
    assert model["layer3.weight"].all()


def test_a_changed_shard_header_fails_the_file_digest(tmp_path: Path) -> None:
    index = _save(tmp_path)
    shard = tmp_path / index["weight_map"]["layer1.weight"]
    data = shard.read_bytes()
    shard.write_bytes(data.replace(b'"producer":"weightstore"', b'"producer":"weightstorf"'))
    with open_reader(tmp_path) as reader:
        assert reader.verify_digests() == []  # every tensor's bytes are still as saved
        with pytest.raises(DigestMismatchError) as caught:
            reader.verify_digests(files=True)
    assert caught.value.path == str(shard) and caught.value.tensor is None


def test_a_burnpack_set_carries_digests(tmp_path: Path) -> None:
    store = BurnpackStore.from_file(tmp_path).with_max_shard_size(5000)
    store.with_digests("sha256").collect_from(_arrays())
    index = json.loads((tmp_path / "model.bpk.index.json").read_text())
    assert set(json.loads(index["metadata"][METADATA_KEY])["files"]) == set(
        index["weight_map"].values()
    )
    with open_reader(tmp_path) as reader:
        assert reader.verify_digests(files=True) == []


def _torch_model(seed: int) -> Any:
    torch = need("torch")
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 8))


def test_a_digest_set_loads_with_huggingface_hub(tmp_path: Path) -> None:
    torch = need("torch")
    hub = need("huggingface_hub")
    saved = _torch_model(0)
    store = SafetensorsStore.from_file(tmp_path).with_max_shard_size("3KB")
    store.with_digests("sha256", index_tensors=True).collect_from(saved)
    assert METADATA_KEY in json.loads((tmp_path / INDEX).read_text())["metadata"]
    loaded = _torch_model(1)
    hub.load_torch_model(loaded, tmp_path, strict=True)
    for name, value in saved.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name


@pytest.mark.slow  # imports transformers and builds two small models: a few seconds
def test_a_digest_set_loads_with_transformers_from_pretrained(tmp_path: Path) -> None:
    torch = need("torch")
    transformers = need("transformers")
    config = transformers.GPT2Config(
        vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    saved = transformers.GPT2LMHeadModel(config).eval()
    config.save_pretrained(tmp_path)
    store = SafetensorsStore.from_file(tmp_path).with_max_shard_size("20KB")
    store.with_digests(index_tensors=True).collect_from(saved)
    assert METADATA_KEY in json.loads((tmp_path / INDEX).read_text())["metadata"]
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    for name, value in saved.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
