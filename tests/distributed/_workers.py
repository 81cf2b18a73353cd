"""What each rank runs in the process-group tests, and the models they share with the parent.

Every worker checks on its own rank and raises on a mismatch (the parent's test then fails
with that rank's traceback); figures go to JSON files in the run's directory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from tests.distributed._counting import counting_reads
from weightstore import SafetensorsStore
from weightstore.distributed import chunk_bounds, load, save
from weightstore.errors import InvalidOptionError

HIDDEN = 7  # rows of fc1 and columns of fc2: uneven over 2 ranks (4, 3) and 4 (2, 2, 2, 1)
VOCAB = 11  # embedding rows: 6, 5 over 2 ranks; 3, 3, 3, 2 over 4
WIDTH = 6
PLAN = {r"^fc1\.": 0, r"^fc2\.weight$": 1, r"^embed\.": 0}  # the TP layout, by name


class Mlp(nn.Module):
    """A tensor-parallel block: an embedding, a norm, a column- and a row-parallel linear."""

    def __init__(self, hidden: int = HIDDEN, vocab: int = VOCAB) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, hidden)
        self.fc2 = nn.Linear(hidden, 5)


def full_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """The whole model's tensors, the same in every process."""
    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.randn(tuple(tensor.shape), generator=generator)
        for name, tensor in Mlp().state_dict().items()
    }


def chunk(full: torch.Tensor, dim: int, rank: int, world_size: int) -> torch.Tensor:
    """Rank `rank`'s piece of `full` by torch's own rule (torch.chunk), the oracle."""
    pieces = torch.chunk(full, world_size, dim=dim)
    if rank < len(pieces):
        return pieces[rank]
    return full.narrow(dim, full.shape[dim], 0)  # ranks past the last chunk get nothing


def local_mlp(rank: int, world_size: int) -> Mlp:
    """A plain model holding this rank's local shapes, as a hand-written TP model does."""
    start, stop = chunk_bounds(HIDDEN, rank, world_size)
    first, last = chunk_bounds(VOCAB, rank, world_size)
    return Mlp(hidden=stop - start, vocab=last - first)


def dtensor_mlp(world_size: int) -> Mlp:
    """The model with DTensor parameters: fc1 and fc2 by ``parallelize_module``, the embedding
    by ``distribute_tensor`` (Shard(0)); the norm stays plain."""
    mesh = init_device_mesh("cpu", (world_size,))
    model = Mlp()
    parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    weight = distribute_tensor(model.embed.weight.detach(), mesh, [Shard(0)])
    model.embed.weight = nn.Parameter(weight)
    return model


def expected_local(name: str, rank: int, world_size: int) -> torch.Tensor:
    full = full_state()[name]
    for pattern, dim in PLAN.items():
        if re.search(pattern, name):
            return chunk(full, dim, rank, world_size)
    return full


def check_local(model: nn.Module, rank: int, world_size: int) -> None:
    """Every tensor of `model` on this rank equals its piece of the full state."""
    for name, tensor in model.state_dict().items():
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        want = expected_local(name, rank, world_size)
        assert torch.equal(local, want), f"rank {rank}: {name} {local.shape} != {want.shape}"


def check_whole(model: nn.Module) -> None:
    """Every DTensor of `model` gathered equals the full tensor (a collective, same order)."""
    full = full_state()
    for name, tensor in model.state_dict().items():
        if isinstance(tensor, DTensor):
            assert torch.equal(tensor.full_tensor(), full[name]), name


def suite(rank: int, world_size: int, run: str) -> None:
    """The default checks on one rank: plan loads (dims 0 and 1, uneven), DTensor loads from
    a file and from a set, a rank-aware save, and the bytes each rank reads."""
    root = Path(run)
    single = SafetensorsStore.from_file(root / "full.safetensors")
    plain = local_mlp(rank, world_size)
    result = load(single, plain, PLAN)
    assert result.is_success() and len(result.applied) == 7, result
    check_local(plain, rank, world_size)

    model = dtensor_mlp(world_size)
    with counting_reads() as counter:
        load(SafetensorsStore.from_file(root / "full.safetensors"), model)
    check_local(model, rank, world_size)
    check_whole(model)
    (root / f"bytes-{rank}.json").write_text(json.dumps(counter.by_file()))

    saved = save(
        SafetensorsStore.from_file(root / "set").with_max_shard_size(200).overwrite(), model
    )
    assert saved == str(root / "set" / "model.safetensors.index.json"), saved
    again = dtensor_mlp(world_size)
    load(SafetensorsStore.from_file(root / "set"), again)
    check_local(again, rank, world_size)

    sharded = fsdp_mlp(world_size)  # every parameter Shard(0), as fully_shard leaves it
    load(SafetensorsStore.from_file(root / "set"), sharded)
    check_whole(sharded)
    save(SafetensorsStore.from_file(root / "fsdp").overwrite(), sharded)
    refusals(root, world_size)
    dist.barrier()


def fsdp_mlp(world_size: int) -> Mlp:
    """The model with every parameter sharded on dim 0 by FSDP2's ``fully_shard``."""
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world_size,))
    model = Mlp()
    fully_shard(model, mesh=mesh)
    return model


def refusals(root: Path, world_size: int) -> None:
    """What a sliced load refuses, on every rank alike, before anything is written."""
    store = SafetensorsStore.from_file(root / "full.safetensors")
    model = dtensor_mlp(world_size)
    before = model.fc2.weight.to_local().clone()
    try:
        load(store, model, {r"^fc2\.weight$": 0})  # the DTensor is split on dim 1
    except InvalidOptionError as err:
        assert "the model's DTensor is split on dim 1" in str(err), err
    else:
        raise AssertionError("a plan against the model's DTensor loaded")
    assert torch.equal(model.fc2.weight.to_local(), before)
    try:
        load(store, model, device="cpu")
    except InvalidOptionError as err:
        assert "DTensors, which stay on their device mesh" in str(err), err
    else:
        raise AssertionError("a device for DTensors was taken")
    if world_size == 4:  # a 2 x 2 mesh: the layout has two placements per tensor
        mesh = init_device_mesh("cpu", (2, 2))
        grid = nn.Linear(4, 4)
        grid.weight = nn.Parameter(
            distribute_tensor(grid.weight.detach(), mesh, [Shard(0), Shard(1)])
        )
        try:
            load(store.allow_partial().validate(False), grid)
        except InvalidOptionError as err:
            assert "2-D device mesh" in str(err), err
        else:
            raise AssertionError("a 2-D mesh loaded")


def suite_then_example(rank: int, world_size: int, run: str, example_port: int) -> None:
    """`suite`, then the page's two-process example (`example_two_ranks.main`) in a process
    group of its own, as its script would start it, in the run's directory."""
    import contextlib
    import io
    import os

    from tests.distributed import example_two_ranks

    suite(rank, world_size, run)
    dist.destroy_process_group()
    os.chdir(run)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        example_two_ranks.main(rank, world_size, example_port)
    want = f"rank {rank}: model.safetensors.index.json, 4 loaded, same: True"
    assert printed.getvalue().strip() == want, printed.getvalue()
