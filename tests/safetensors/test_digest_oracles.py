"""A SafeTensors file carrying digests (docs/integrity.md) is still what the `safetensors`
package reads: the digests are one string value under ``__metadata__``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests._optional import need
from weightstore import SafetensorsStore
from weightstore.io._digest import METADATA_KEY, digest_of


def _save(path: Path) -> dict[str, np.ndarray]:
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, np.float16)}
    SafetensorsStore.from_file(path).with_digests("sha256").collect_from(arrays)
    return arrays


def test_safe_open_reads_the_file_and_its_digest_metadata(tmp_path: Path) -> None:
    safetensors = need("safetensors")
    path = tmp_path / "m.safetensors"
    arrays = _save(path)
    with safetensors.safe_open(str(path), "np") as opened:
        metadata = opened.metadata()
        for name, array in arrays.items():
            assert np.array_equal(opened.get_tensor(name), array)
    digests = json.loads(metadata[METADATA_KEY])["tensors"]
    assert digests == {name: digest_of("sha256", a.tobytes()) for name, a in arrays.items()}


def test_safetensors_torch_load_file_reads_the_file(tmp_path: Path) -> None:
    torch = need("torch")
    st_torch = need("safetensors.torch")
    path = tmp_path / "m.safetensors"
    arrays = _save(path)
    loaded = st_torch.load_file(str(path))
    for name, array in arrays.items():
        assert torch.equal(loaded[name], torch.from_numpy(array)), name
