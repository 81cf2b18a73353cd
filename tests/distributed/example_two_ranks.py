"""Two processes save a tensor-parallel model as one set, then load it back, each its slices."""

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from weightstore import SafetensorsStore
from weightstore.distributed import load, save


def build(mesh, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 48), nn.ReLU(), nn.Linear(48, 16))
    # Column-parallel first layer (rows split), row-parallel second (columns split).
    return parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})


def main(rank, world_size, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))

    trained = build(mesh, seed=0)
    # Every rank writes the tensors it owns; rank 0 commits the index after the others.
    index = save(SafetensorsStore.from_file("tp-checkpoint").overwrite(), trained)

    fresh = build(mesh, seed=1)
    # Each rank reads only its slice of every split tensor.
    result = load(SafetensorsStore.from_file("tp-checkpoint"), fresh)
    same = all(
        torch.equal(a.to_local(), b.to_local())
        for a, b in zip(trained.parameters(), fresh.parameters(), strict=True)
    )
    print(f"rank {rank}: {os.path.basename(index)}, {len(result.applied)} loaded, same: {same}")
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    mp.spawn(main, args=(2, free_port), nprocs=2)
