"""Read once, share across ranks (`weightstore.distributed.load(..., read_once=True)`), on real
gloo groups of 2 and 4 ranks: every rank gets every replicated tensor exactly, while the ranks
together read each tensor's bytes once (1x the file, not world x), from a local file and over
HTTP; split tensors still read only each rank's slice; ranks that would read different tensors
all stop with the same typed error, and no rank hangs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._ranks import run_ranks  # skips without torch.distributed
from tests.distributed._counting import counting_reads
from tests.remote.conftest import HttpServer, http_server  # noqa: F401  (the fixture)
from weightstore import SafetensorsStore, save_into
from weightstore.distributed import chunk_bounds, load
from weightstore.errors import InvalidOptionError

torch = pytest.importorskip("torch")


def _tensors() -> dict[str, np.ndarray[Any, Any]]:
    """Eight 32 KiB matrices and four small vectors: the owners balance exactly over 2 and 4."""
    rng = np.random.default_rng(11)
    tensors = {f"layers.{i}.weight": rng.standard_normal((32, 256)) for i in range(8)}
    tensors |= {f"norms.{i}.weight": rng.standard_normal(64) for i in range(4)}
    return {name: array.astype(np.float32) for name, array in tensors.items()}


def _header(path: Path) -> int:
    with counting_reads() as counter:
        SafetensorsStore.from_file(path).keys()
    return counter.total


def _rank_local(rank: int, world_size: int, run: str) -> None:
    root = Path(run)
    tensors = _tensors()
    model = {name: np.zeros_like(array) for name, array in tensors.items()}
    with counting_reads() as counter:
        result = load(SafetensorsStore.from_file(root / "m.safetensors"), model, read_once=True)
    assert result.is_success(), result
    for name, array in tensors.items():
        assert np.array_equal(model[name], array), name
    (root / f"read-{rank}.json").write_text(json.dumps(counter.total))


@pytest.mark.parametrize("world_size", [2, 4])
def test_replicated_tensors_are_read_once_in_all(tmp_path: Path, world_size: int) -> None:
    tensors = _tensors()
    save_into(dict(tensors), SafetensorsStore.from_file(tmp_path / "m.safetensors"))
    run_ranks(_rank_local, world_size, str(tmp_path))
    header = _header(tmp_path / "m.safetensors")
    read = [json.loads((tmp_path / f"read-{r}.json").read_text()) - header
            for r in range(world_size)]  # fmt: skip
    total = sum(array.nbytes for array in tensors.values())
    assert sum(read) == total  # 1x the tensors, not world x
    for rank, nbytes in enumerate(read):
        assert nbytes == total // world_size, (rank, read)  # the owners balance exactly
        print(f"world {world_size} rank {rank}: read {nbytes:,} of {total:,} tensor bytes "
              f"({nbytes / total:.3f}; header {header:,} each)")  # fmt: skip


def _rank_mixed(rank: int, world_size: int, run: str) -> None:
    """A torch model: fc.weight split by rows, the rest replicated and shared."""
    root = Path(run)
    full = {name: torch.from_numpy(array) for name, array in _tensors().items()}
    rows = chunk_bounds(32, rank, world_size)
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(
        torch.nn.Linear(256, rows[1] - rows[0] if i == 0 else 32, bias=False) for i in range(8)
    )
    model.norms = torch.nn.ModuleList(torch.nn.LayerNorm(64, bias=False) for _ in range(4))
    plan = {r"^layers\.0\.weight$": 0}
    with counting_reads() as counter:
        result = load(SafetensorsStore.from_file(root / "m.safetensors"), model, plan,
                      read_once=True)  # fmt: skip
    assert result.is_success(), result
    got = model.state_dict()
    assert torch.equal(got["layers.0.weight"], full["layers.0.weight"][rows[0] : rows[1]])
    for name, tensor in full.items():
        if name != "layers.0.weight":
            assert torch.equal(got[name], tensor), name
    (root / f"read-{rank}.json").write_text(json.dumps(counter.total))


def test_split_tensors_read_their_slices_and_the_rest_is_shared(tmp_path: Path) -> None:
    tensors = _tensors()
    save_into(dict(tensors), SafetensorsStore.from_file(tmp_path / "m.safetensors"))
    world_size = 2
    run_ranks(_rank_mixed, world_size, str(tmp_path))
    header = _header(tmp_path / "m.safetensors")
    read = [json.loads((tmp_path / f"read-{r}.json").read_text()) - header
            for r in range(world_size)]  # fmt: skip
    assert sum(read) == sum(a.nbytes for a in tensors.values())  # slices + shared: 1x
    slice_bytes = tensors["layers.0.weight"].nbytes // world_size
    assert all(nbytes >= slice_bytes for nbytes in read), read


def _rank_url(rank: int, world_size: int, url: str, run: str) -> None:
    tensors = _tensors()
    model = {name: np.zeros_like(array) for name, array in tensors.items()}
    result = load(SafetensorsStore.from_file(url), model, read_once=True)
    assert result.is_success(), result
    for name, array in tensors.items():
        assert np.array_equal(model[name], array), name


@pytest.mark.parametrize("world_size", [2, 4])
def test_over_http_the_ranks_together_fetch_the_file_once(
    http_server: HttpServer,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    world_size: int,
) -> None:
    pytest.importorskip("fsspec", reason="URLs need the remote extra")
    tensors = _tensors()
    data_path = http_server.root / "m.safetensors"
    save_into(dict(tensors), SafetensorsStore.from_file(data_path))
    http_server.requests.clear()
    run_ranks(_rank_url, world_size, http_server.url("m.safetensors"), str(tmp_path))
    total = sum(array.nbytes for array in tensors.values())
    head = 64 * 1024  # each rank's first request: the header and what follows it
    assert http_server.nbytes <= world_size * head + 1.01 * total, (http_server.nbytes, total)
    print(f"world {world_size}: {http_server.nbytes:,} bytes served for {total:,} tensor bytes "
          f"(file {data_path.stat().st_size:,})")  # fmt: skip


def _rank_disagreeing(rank: int, world_size: int, run: str) -> None:
    tensors = _tensors()
    if rank == 1:
        del tensors["norms.2.weight"]  # another model on this rank
    model = {name: np.zeros_like(array) for name, array in tensors.items()}
    store = SafetensorsStore.from_file(Path(run) / "m.safetensors").allow_partial(True)
    try:
        load(store, model, read_once=True)
    except InvalidOptionError as err:
        (Path(run) / f"error-{rank}.txt").write_text(str(err))
        return
    raise AssertionError("a disagreeing load ran")


def test_ranks_reading_different_tensors_all_stop_with_the_same_error(tmp_path: Path) -> None:
    save_into(_tensors(), SafetensorsStore.from_file(tmp_path / "m.safetensors"))
    run_ranks(_rank_disagreeing, 2, str(tmp_path))  # a hang fails at the harness's deadline
    messages = {(tmp_path / f"error-{r}.txt").read_text() for r in range(2)}
    assert len(messages) == 1
    message = messages.pop()
    assert "every rank to read the same replicated tensors" in message
    assert "'norms.2.weight'" in message and "rank 1" in message


def test_read_once_needs_a_process_group(tmp_path: Path) -> None:
    save_into(_tensors(), SafetensorsStore.from_file(tmp_path / "m.safetensors"))
    model = {name: np.zeros_like(array) for name, array in _tensors().items()}
    with pytest.raises(InvalidOptionError, match="init_process_group"):
        load(SafetensorsStore.from_file(tmp_path / "m.safetensors"), model, rank=0,
             world_size=2, read_once=True)  # fmt: skip
    result = load(SafetensorsStore.from_file(tmp_path / "m.safetensors"), model, rank=0,
                  world_size=1, read_once=True)  # fmt: skip
    assert result.is_success()  # one rank: nothing to share, read as usual
