"""NeMo checkpoints built from NeMo's documented structure (NeMo itself is too large to install
for tests): a NeMo 1 ``.nemo`` tar (``model_config.yaml`` + ``model_weights.ckpt``), the same
extracted, and a NeMo 2 directory (``weights/`` as torch DCP, ``context/model.yaml``); each
read as the checkpoint it holds, tensors against what torch saved, the config as metadata."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import open_reader
from weightstore.errors import SetError, UnsupportedFormatError
from weightstore.training._nemo import CONFIG_KEY, NemoReader, is_nemo_checkpoint, open_nemo

torch = pytest.importorskip("torch")

CONFIG = "target: nemo.collections.llm.GPTModel\nhidden_size: 8\nnum_layers: 1\n"


def _state() -> dict[str, Any]:
    generator = torch.Generator().manual_seed(5)
    return {
        "model.embedding.weight": torch.randn(16, 8, generator=generator),
        "model.decoder.layers.0.mlp.weight": torch.randn(8, 8, generator=generator).half(),
    }


def _weights_bytes() -> bytes:
    buffer = io.BytesIO()
    torch.save(_state(), buffer)
    return buffer.getvalue()


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _nemo_file(path: Path, *, mode: str = "w:", weights: bool = True) -> Path:
    with tarfile.open(path, mode) as archive:  # type: ignore[call-overload]
        _add(archive, "./model_config.yaml", CONFIG.encode())
        if weights:
            _add(archive, "./model_weights.ckpt", _weights_bytes())
    return path


def _check(reader: Any) -> None:
    state = _state()
    assert sorted(reader.names()) == sorted(state)
    for name, tensor in state.items():
        assert np.array_equal(reader.get(name), tensor.numpy()), name
    assert reader.metadata()[CONFIG_KEY] == CONFIG


def test_a_nemo_tar_reads_its_weights_in_place(tmp_path: Path) -> None:
    path = _nemo_file(tmp_path / "model.nemo")
    assert is_nemo_checkpoint(str(path))
    with open_nemo(str(path)) as reader:
        _check(reader)
        assert reader.path.endswith("model.nemo:model_weights.ckpt")


def test_an_extracted_nemo_reads_as_the_tar_does(tmp_path: Path) -> None:
    folder = tmp_path / "extracted"
    folder.mkdir()
    (folder / "model_config.yaml").write_text(CONFIG)
    (folder / "model_weights.ckpt").write_bytes(_weights_bytes())
    assert is_nemo_checkpoint(str(folder))
    with open_nemo(str(folder)) as reader:
        _check(reader)


def test_a_nemo2_directory_reads_its_dcp_weights(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    folder = tmp_path / "nemo2"
    (folder / "context").mkdir(parents=True)
    (folder / "context" / "model.yaml").write_text(CONFIG)
    with pytest.warns(UserWarning):  # torch: no process group, saving in one process
        dcp.save(_state(), checkpoint_id=folder / "weights")
    assert is_nemo_checkpoint(str(folder))
    with open_nemo(str(folder)) as reader:
        assert isinstance(reader, NemoReader)
        _check(reader)


def test_a_compressed_or_incomplete_nemo_is_refused_naming_the_fix(tmp_path: Path) -> None:
    compressed = _nemo_file(tmp_path / "gz.nemo", mode="w:gz")
    with pytest.raises(UnsupportedFormatError, match=r"gz\.nemo.*gzip-compressed.*tar -xzf"):
        open_nemo(str(compressed))
    empty = _nemo_file(tmp_path / "empty.nemo", weights=False)
    with pytest.raises(SetError, match=r"empty\.nemo.*holds no model_weights\.ckpt"):
        open_nemo(str(empty))
    (tmp_path / "not.nemo").write_bytes(b"\x00" * 1024)
    with pytest.raises(UnsupportedFormatError, match="no tar archive"):
        open_nemo(str(tmp_path / "not.nemo"))


def test_open_reader_and_the_stores_read_a_nemo_file(tmp_path: Path) -> None:
    from weightstore import Store

    path = _nemo_file(tmp_path / "model.nemo")
    with open_reader(path) as reader:
        _check(reader)
    assert sorted(Store.from_file(path).keys()) == sorted(_state())
