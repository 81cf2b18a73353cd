"""Real process groups on the CPU (gloo): sliced loads, DTensor loads and rank-aware saves.

Each run spawns the ranks once and checks everything on every rank (`_workers.suite`): plain
models loaded by a ``{regex: dim}`` plan on dims 0 and 1 with uneven chunks, models with DTensor
parameters (``parallelize_module``, ``distribute_tensor``) loaded from a file and from a set,
and a rank-aware save. Here, after the ranks are done: the saved set against a single-process
save of the same model, and the bytes each rank read against its share. Two ranks run by
default, and then the two-process example of docs/distributed.md in the same processes; four ranks
are slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._ranks import free_port, run_ranks  # skips without torch.distributed
from tests.distributed._workers import PLAN, Mlp, full_state, suite, suite_then_example
from weightstore import SafetensorsStore
from weightstore.distributed import chunk_bounds

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _set_tensors(directory: Path) -> dict[str, object]:
    """Every tensor of the set in `directory`, read by the safetensors package shard by shard
    and placed by the index (an oracle independent of our reader)."""
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    tensors: dict[str, object] = {}
    for shard in sorted(set(index["weight_map"].values())):
        held = safetensors_torch.load_file(directory / shard)
        assert {n for n, s in index["weight_map"].items() if s == shard} == set(held)
        tensors.update(held)
    return tensors


def _expected_bytes(rank: int, world_size: int) -> tuple[int, int, int]:
    """This rank's share of the file's tensor bytes: split, replicated, and the whole."""
    import re

    split = replicated = 0
    for name, tensor in full_state().items():
        dims = [dim for pattern, dim in PLAN.items() if re.search(pattern, name)]
        nbytes = tensor.numel() * tensor.element_size()
        if dims:
            start, stop = chunk_bounds(tensor.shape[dims[0]], rank, world_size)
            split += nbytes // tensor.shape[dims[0]] * (stop - start)
        else:
            replicated += nbytes
    return split, replicated, sum(t.numel() * t.element_size() for t in full_state().values())


def _header_bytes(path: Path) -> int:
    """What opening the file reads before any tensor: what a load reads besides its slices."""
    from tests.distributed._counting import counting_reads

    with counting_reads() as counter:
        SafetensorsStore.from_file(path).keys()
    return counter.total


def _check_run(run: Path, world_size: int) -> None:
    model = Mlp()
    model.load_state_dict(full_state())
    single = SafetensorsStore.from_file(run / "single.safetensors").collect_from(model)
    want = safetensors_torch.load_file(single)
    for saved in (run / "set", run / "fsdp"):  # by TP ranks in shards of 200 bytes; by FSDP
        got = _set_tensors(saved)
        assert sorted(got) == sorted(want)
        for name, tensor in want.items():
            assert torch.equal(got[name], tensor), (saved.name, name)
    hub = pytest.importorskip("huggingface_hub")
    loaded = Mlp()
    hub.load_torch_model(loaded, run / "set", strict=True)  # their loader reads our set
    assert all(torch.equal(t, want[n]) for n, t in loaded.state_dict().items())
    header = _header_bytes(run / "full.safetensors")
    for rank in range(world_size):
        read = json.loads((run / f"bytes-{rank}.json").read_text())["full.safetensors"]
        split, replicated, _ = _expected_bytes(rank, world_size)
        assert read == header + split + replicated, (rank, read, header, split, replicated)


def _run(tmp_path: Path, world_size: int) -> None:
    safetensors_torch.save_file(full_state(), tmp_path / "full.safetensors")  # by the oracle
    if world_size == 2:  # the page's example too, in the same processes: one spawn, not two
        run_ranks(suite_then_example, world_size, str(tmp_path), free_port())
    else:
        run_ranks(suite, world_size, str(tmp_path))
    _check_run(tmp_path, world_size)


def test_two_ranks_load_their_slices_save_one_set_and_run_the_example(tmp_path: Path) -> None:
    _run(tmp_path, 2)


@pytest.mark.slow
def test_four_ranks_load_their_slices_and_save_one_set(tmp_path: Path) -> None:
    _run(tmp_path, 4)
