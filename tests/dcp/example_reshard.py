"""Two processes save DTensors split by rows, then load them back split by columns."""

import os
import socket

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from weightstore.dcp import BurnpackStorageReader, BurnpackStorageWriter


def main(rank, world_size, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))

    weight = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)
    state = {"model": {"weight": distribute_tensor(weight, mesh, [Shard(0)])}, "step": 100}
    # Each rank writes its rows to a file of its own; rank 0 commits the index last.
    dcp.save(state, storage_writer=BurnpackStorageWriter("dcp-checkpoint", overwrite=True))

    columns = distribute_tensor(torch.zeros(8, 6), mesh, [Shard(1)])
    target = {"model": {"weight": columns}, "step": 0}
    # DCP's planner reshards; each rank reads only the columns it holds.
    dcp.load(target, storage_reader=BurnpackStorageReader("dcp-checkpoint"))
    local = target["model"]["weight"].to_local()
    same = torch.equal(local, weight.chunk(world_size, dim=1)[rank])
    shape, step = tuple(local.shape), target["step"]
    print(f"rank {rank}: columns {shape}, step {step}, same: {same}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    mp.spawn(main, args=(2, free_port), nprocs=2)
