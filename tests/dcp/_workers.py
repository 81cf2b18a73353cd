"""What each rank runs in the torch.distributed.checkpoint tests, and the data they share with
the parent process.

Every rank checks what it loaded against torch's own values (``torch.chunk`` is the oracle of
a ``Shard(dim)`` placement) and records the outcome of each scenario, and the figures, in a
JSON file per rank; the parent's tests assert on those. A scenario that raises records the
error and the ranks go on to the next one (DCP raises on every rank alike, so they stay in
step).
"""

from __future__ import annotations

import json
import os
import signal
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Placement, Replicate, Shard, distribute_tensor

from tests.dcp._counting import counting_reads
from weightstore.dcp import BurnpackStorageReader, BurnpackStorageWriter

ROWS, COLS = 256, 128  # model.w, float32: 128 KiB, split 128 + 128 rows or columns
EMBED = (33, 64)  # model.e, bfloat16: uneven over 2 ranks (17 + 16 rows)


def full_tensors(version: int = 0) -> dict[str, torch.Tensor]:
    """The checkpoint's whole tensors, the same in every process (`version` changes them)."""
    generator = torch.Generator().manual_seed(1234 + version)
    return {
        "w": torch.randn(ROWS, COLS, generator=generator),
        "e": torch.randn(*EMBED, generator=generator).to(torch.bfloat16),
        "b": torch.arange(COLS, dtype=torch.float32) + version,
        "step": torch.tensor(5 + version),
    }


def plain_values(version: int = 0) -> dict[str, Any]:
    """The checkpoint's non-tensor values: nested dicts of plain values."""
    return {
        "epoch": 3 + version,
        "sched": {
            "lr": 0.01,
            "betas": (0.9, 0.999),
            "milestones": [10, 20],
            "name": "cosine",
            "extra": None,
            "blob": b"\x00\x01\xff",
            # A tuple is a leaf to DCP (a dict would be flattened), so these keys stay as is.
            "table": ({1: "one", (2, 3): [4.5, float("inf")]},),
        },
    }


def state(
    tensors: dict[str, torch.Tensor],
    values: dict[str, Any],
    wrap: Callable[[str, torch.Tensor], Any],
) -> dict[str, Any]:
    """The state dict DCP saves or loads into: ``model`` holds the tensors (`wrap` makes each
    a DTensor or leaves it), the rest are values."""
    return {"model": {name: wrap(name, tensor) for name, tensor in tensors.items()}, **values}


def blank_values() -> dict[str, Any]:
    """Placeholders a load overwrites, of other values than `plain_values`."""
    return {"epoch": 0, "sched": {key: None for key in plain_values()["sched"]}}


def local_chunk(full: torch.Tensor, dim: int, rank: int, world_size: int) -> torch.Tensor:
    """Rank `rank`'s part of `full` under ``Shard(dim)``, by torch's own rule."""
    return torch.chunk(full, world_size, dim=dim)[rank]


# -- the suite: one process group, every scenario ----------------------------------------------


class Recorder:
    """Each scenario's outcome on this rank ("ok", or what failed) and figures, as JSON."""

    def __init__(self, root: Path, rank: int) -> None:
        self.path = root / f"results-{rank}.json"
        self.results: dict[str, Any] = {}

    def run(self, name: str, scenario: Callable[[], Any]) -> None:
        try:
            outcome = scenario()
            self.results[name] = "ok" if outcome is None else outcome
        except BaseException as err:  # CheckpointException is a BaseException
            self.results[name] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
        self.path.write_text(json.dumps(self.results, indent=2))
        dist.barrier()


def _distributed(mesh: DeviceMesh, placements: dict[str, Placement]) -> Callable[..., Any]:
    """A `state` wrapper making the named tensors DTensors with the given placements."""

    def wrap(name: str, tensor: torch.Tensor) -> Any:
        placement = placements.get(name)
        return tensor if placement is None else distribute_tensor(tensor, mesh, [placement])

    return wrap


def _check_loaded(
    loaded: dict[str, Any], dims: dict[str, int | None], rank: int, world_size: int
) -> None:
    """The loaded state against the oracle: each DTensor's local part, plain tensors and
    values whole."""
    full = full_tensors()
    for name, tensor in loaded["model"].items():
        dim = dims.get(name)
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        expected = full[name] if dim is None else local_chunk(full[name], dim, rank, world_size)
        assert torch.equal(local, expected), (name, dim)
    values = plain_values()
    assert loaded["epoch"] == values["epoch"]
    assert loaded["sched"] == values["sched"], loaded["sched"]
    for key, value in values["sched"].items():
        assert type(loaded["sched"][key]) is type(value), key


def suite(rank: int, world_size: int, root_text: str) -> None:
    """Every scenario of test_process_groups.py, in one process group."""
    root = Path(root_text)
    mesh = init_device_mesh("cpu", (world_size,))
    recorder = Recorder(root, rank)
    checkpoint = root / "ckpt"
    shard0 = _distributed(mesh, {"w": Shard(0), "e": Shard(0)})

    def save_shard0() -> None:
        saved = state(full_tensors(), plain_values(), shard0)
        dcp.save(saved, storage_writer=BurnpackStorageWriter(checkpoint))

    def load_as(placements: dict[str, Placement]) -> Callable[[], dict[str, int]]:
        def scenario() -> dict[str, int]:
            zeros = {name: torch.zeros_like(t) for name, t in full_tensors().items()}
            target = state(zeros, blank_values(), _distributed(mesh, placements))
            with counting_reads() as counter:
                dcp.load(target, storage_reader=BurnpackStorageReader(checkpoint))
            dims = {n: p.dim if isinstance(p, Shard) else None for n, p in placements.items()}
            _check_loaded(target, dims, rank, world_size)
            destination = sum(
                (t.to_local() if isinstance(t, DTensor) else t).nbytes
                for t in target["model"].values()
            )
            touched = sum(t.nbytes for t in full_tensors().values())  # every chunk, whole
            return {
                "data_bytes": counter.data_bytes,
                "header_bytes": counter.header_bytes,
                "files": counter.files,
                "destination_bytes": destination,
                "whole_chunk_bytes": touched,
            }

        return scenario

    recorder.run("save_shard0", save_shard0)
    recorder.run("load_shard1", load_as({"w": Shard(1), "e": Shard(1)}))
    recorder.run("load_replicate", load_as({"w": Replicate(), "e": Replicate()}))
    recorder.run("load_shard0", load_as({"w": Shard(0), "e": Shard(0)}))
    recorder.run("single_rank_saved", lambda: _load_single(root, mesh, rank, world_size))
    recorder.run("train_state", lambda: _train_state(root, mesh, rank))
    recorder.run("async_save", lambda: _async_save(root, mesh, rank, world_size))


def _load_single(root: Path, mesh: DeviceMesh, rank: int, world_size: int) -> None:
    """A checkpoint one process saved (the parent, with no group), loaded split over ranks."""
    placements: dict[str, Placement] = {"w": Shard(1), "e": Shard(0)}
    zeros = {name: torch.zeros_like(t) for name, t in full_tensors().items()}
    target = state(zeros, blank_values(), _distributed(mesh, placements))
    dcp.load(target, storage_reader=BurnpackStorageReader(root / "single"))
    _check_loaded(target, {"w": 1, "e": 0}, rank, world_size)


def _async_save(root: Path, mesh: DeviceMesh, rank: int, world_size: int) -> None:
    saved = state(full_tensors(), plain_values(), _distributed(mesh, {"w": Shard(1)}))
    pending = dcp.async_save(saved, storage_writer=BurnpackStorageWriter(root / "async"))
    upload = getattr(pending, "upload_completion", pending)
    upload.result()
    zeros = {name: torch.zeros_like(t) for name, t in full_tensors().items()}
    target = state(zeros, blank_values(), _distributed(mesh, {"w": Shard(0)}))
    dcp.load(target, storage_reader=BurnpackStorageReader(root / "async"))
    _check_loaded(target, {"w": 0}, rank, world_size)


# -- a model and its optimizer, through get_state_dict -----------------------------------------


def _trained(mesh: DeviceMesh, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """An FSDP2 model after one Adam step, the same on every rank for one seed."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    inputs = torch.randn(4, 8, generator=torch.Generator().manual_seed(seed))
    model(inputs).sum().backward()
    optimizer.step()
    return model, optimizer


def _whole(value: Any) -> Any:
    if isinstance(value, DTensor):
        return value.full_tensor()
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value


def _train_state(root: Path, mesh: DeviceMesh, rank: int) -> None:
    """Save a model and its optimizer state as DCP users do, load them into another model's,
    and compare every tensor and value."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model, optimizer = _trained(mesh, seed=1)
    model_state, optim_state = get_state_dict(model, optimizer)
    expected = _whole({"model": model_state, "optim": optim_state})
    if rank == 0:
        torch.save(expected, root / "train-expected.pt")
    dcp.save(
        {"model": model_state, "optim": optim_state},
        storage_writer=BurnpackStorageWriter(root / "train"),
    )
    other, other_optimizer = _trained(mesh, seed=2)
    other_model_state, other_optim_state = get_state_dict(other, other_optimizer)
    loaded = {"model": other_model_state, "optim": other_optim_state}
    dcp.load(loaded, storage_reader=BurnpackStorageReader(root / "train"))
    set_state_dict(
        other, other_optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"]
    )
    again_model, again_optim = get_state_dict(other, other_optimizer)
    _assert_same(_whole({"model": again_model, "optim": again_optim}), expected, "")


def _assert_same(found: Any, expected: Any, where: str) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(found, torch.Tensor) and torch.equal(found, expected), where
    elif isinstance(expected, dict):
        assert found.keys() == expected.keys(), where
        for key in expected:
            _assert_same(found[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert len(found) == len(expected), where
        for index, (item, want) in enumerate(zip(found, expected, strict=True)):
            _assert_same(item, want, f"{where}.{index}")
    else:
        assert found == expected and type(found) is type(expected), (where, found, expected)


# -- killed mid-overwrite ------------------------------------------------------------------------


class _KillingPlanner(DefaultSavePlanner):
    """Kills its own process (SIGKILL) when the writer asks it for chunk number `kill_at`."""

    def __init__(self, kill_at: int) -> None:
        super().__init__()
        self.kill_at, self.resolved = kill_at, 0

    def resolve_data(self, write_item: Any) -> Any:
        if write_item.tensor_data is not None:
            self.resolved += 1
            if self.resolved == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().resolve_data(write_item)


class _KillingWriter(BurnpackStorageWriter):
    """Kills its own process just before the commit, or just after it (before the cleanup)."""

    def __init__(self, path: Path, when: str) -> None:
        super().__init__(path, overwrite=True)
        self.when = when

    def finish(self, metadata: Any, results: Any) -> None:
        if self.when == "before-commit":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.when == "after-commit":
            from weightstore.dcp import _commit as _dcp_commit

            def killed(directory: str, keep: Any) -> None:
                os.kill(os.getpid(), signal.SIGKILL)

            _dcp_commit.remove_unnamed = killed  # commit_index calls it after the rename
        super().finish(metadata, results)


def overwrite(rank: int, world_size: int, directory: str, kill_rank: int, when: str) -> None:
    """Save version 1 over the committed checkpoint in `directory`, Shard(0) over the group;
    rank `kill_rank` SIGKILLs itself at `when`: ``"chunk-<n>"`` (when the writer asks for its
    n-th chunk), ``"before-commit"`` or ``"after-commit"`` (the coordinator)."""
    mesh = init_device_mesh("cpu", (world_size,))
    saved = state(
        full_tensors(1), plain_values(1), _distributed(mesh, {"w": Shard(0), "e": Shard(0)})
    )
    planner = DefaultSavePlanner()
    writer = BurnpackStorageWriter(directory, overwrite=True)
    if rank == kill_rank and when.startswith("chunk-"):
        planner = _KillingPlanner(int(when.removeprefix("chunk-")))
    elif rank == kill_rank:
        writer = _KillingWriter(Path(directory), when)
    dcp.save(saved, storage_writer=writer, planner=planner)
