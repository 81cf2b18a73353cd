"""The sharded output of torch's ``HuggingFaceStorageWriter`` (``save_distributed=True``) from
2 and 4 gloo ranks, consolidated on read: every tensor against torch's own whole tensors and
its own consolidated set, a slice read from the shards it crosses, and shards that do not tile
a tensor refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests._ranks import run_ranks  # skips without torch.distributed
from tests.dcp import _stock
from weightstore import SafetensorsStore, open_reader
from weightstore.dcp._hf_sharded import HfShardedReader
from weightstore.errors import SetError

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n} ranks")
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(f"hf{request.param}")
    run_ranks(_stock.save_hf, request.param, str(root))
    return root


def _torch(array: np.ndarray) -> torch.Tensor:  # type: ignore[type-arg]
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


def test_the_shards_read_as_whole_tensors_equal_to_torch_s_own(saved: Path) -> None:
    full = _stock.full_tensors()
    consolidated = {}
    for shard in sorted((saved / "hf-consolidated").glob("model-*.safetensors")):
        consolidated.update(safetensors_torch.load_file(shard))
    with open_reader(saved / "hf") as reader:
        assert isinstance(reader, HfShardedReader)
        assert reader.names() == ["b", "v", "w"]
        for name in reader.names():
            got = _torch(reader.get(name))
            assert torch.equal(got, full[name]) and torch.equal(got, consolidated[name]), name
        assert torch.equal(_torch(reader.get_slice("v")[3:9, 4:17]), full["v"][3:9, 4:17])
    assert sorted(SafetensorsStore.from_file(saved / "hf").keys()) == ["b", "v", "w"]


def test_shards_that_leave_a_hole_are_refused(saved: Path, tmp_path: Path) -> None:
    shards = sorted((saved / "hf").glob("shard-*.safetensors"))
    folder = tmp_path / "holed"
    folder.mkdir()
    for shard in shards[1:]:  # the first rank's shard lost
        (folder / shard.name).write_bytes(shard.read_bytes())
    with pytest.raises(SetError, match=r"tensor '[vw]'.*no chunk holds element \[0, 0\]"):
        open_reader(folder)


def test_a_shard_without_sharding_info_is_refused(saved: Path, tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    name = sorted((saved / "hf").glob("shard-*.safetensors"))[0].name
    safetensors_torch.save_file({"w": torch.zeros(2)}, folder / name, metadata={"x": "1"})
    with pytest.raises(SetError, match="no DCP_SHARDING_INFO"):
        open_reader(folder)
    info = json.dumps({"w": {"saved_offsets": [-1]}})
    safetensors_torch.save_file(
        {"w": torch.zeros(2)}, folder / name, metadata={"DCP_SHARDING_INFO": info}
    )
    with pytest.raises(SetError, match=r"tensor 'w'.*DCP_SHARDING_INFO gives"):
        open_reader(folder)
