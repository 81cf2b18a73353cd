"""What each rank runs to save checkpoints with torch's own DCP writer (``dcp.save`` with no
storage writer: ``FileSystemWriter``), and the whole tensors they hold, for the tests of
reading them without torch (test_torch_writer.py).

Each rank saves two checkpoints: ``plain``, a state dict of DTensors placed ``Shard(0)`` and
``Shard(1)`` (uneven), a replicated tensor and plain values; and ``train``, an FSDP2 model
after one Adam step with its optimizer state, as torchtitan saves one. Rank 0 writes the whole
tensors and values (``torch.save``) beside them for the parent to compare with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

ROWS, COLS = 64, 48  # model.w split on rows, model.v (bf16, 33 x 20) on columns: uneven


def full_tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return {
        "w": torch.randn(ROWS, COLS, generator=generator),
        "v": torch.randn(33, 20, generator=generator).to(torch.bfloat16),
        "b": torch.arange(COLS, dtype=torch.float32),
    }


def values() -> dict[str, Any]:
    return {"step": 11, "sched": {"lr": 0.003, "name": "cosine"}}


def _whole(value: Any) -> Any:
    if isinstance(value, DTensor):
        return value.full_tensor()
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    return value


def _placed(mesh: Any) -> dict[str, Any]:
    """`full_tensors` as this rank holds them: ``w`` on rows, ``v`` on columns, ``b`` whole."""
    full = full_tensors()
    return {
        "w": distribute_tensor(full["w"], mesh, [Shard(0)]),
        "v": distribute_tensor(full["v"], mesh, [Shard(1)]),
        "b": full["b"],
    }


def save(rank: int, world_size: int, root_text: str) -> None:
    """Save ``plain`` and ``train`` under `root_text` with torch's default writer."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    root = Path(root_text)
    mesh = init_device_mesh("cpu", (world_size,))
    dcp.save({"model": _placed(mesh), **values()}, checkpoint_id=root / "plain")

    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 8, generator=torch.Generator().manual_seed(3))).sum().backward()
    optimizer.step()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=root / "train")
    whole = _whole({"model": model_state, "optim": optim_state})
    if rank == 0:
        torch.save(whole, root / "train-expected.pt")
    dist.barrier()


LARGE = (512, 256)  # float32, 512 KiB: a chunk's torch.save wrapping is under 1% of it


def large_tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(9)
    return {
        "rows": torch.randn(*LARGE, generator=generator),
        "cols": torch.randn(*LARGE, generator=generator),
    }


def save_large(rank: int, world_size: int, root_text: str) -> None:
    """Save ``large``: ``model.rows`` placed ``Shard(0)``, ``model.cols`` ``Shard(1)``."""
    mesh = init_device_mesh("cpu", (world_size,))
    full = large_tensors()
    placed = {
        "rows": distribute_tensor(full["rows"], mesh, [Shard(0)]),
        "cols": distribute_tensor(full["cols"], mesh, [Shard(1)]),
    }
    dcp.save({"model": placed}, checkpoint_id=Path(root_text) / "large")
    dist.barrier()


def save_hf(rank: int, world_size: int, root_text: str) -> None:
    """Save the ``plain`` tensors through torch's ``HuggingFaceStorageWriter``, sharded per
    rank, with its own consolidation beside (the oracle)."""
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    placed = _placed(init_device_mesh("cpu", (world_size,)))
    root = Path(root_text)
    dcp.save(
        placed, storage_writer=HuggingFaceStorageWriter(str(root / "hf"), save_distributed=True)
    )
    writer = HuggingFaceStorageWriter(
        str(root / "hf-consolidated"), save_distributed=True, enable_consolidation=True
    )
    dcp.save(placed, storage_writer=writer)
    dist.barrier()
