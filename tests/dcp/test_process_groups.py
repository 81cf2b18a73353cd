"""torch.distributed.checkpoint through weightstore's storage, on a real process group: two
gloo ranks on the CPU save DTensors split on rows and load them split on columns, replicated
and whole in one process; a checkpoint one process saved loads split over two; a model and
its optimizer state go through ``get_state_dict``; ``dcp.async_save`` commits as ``dcp.save``
does; each rank's reads are counted.

One group runs every scenario (`tests.dcp._workers.suite`) and records each one's outcome;
the tests below assert on those records and on the files the group left.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from tests._ranks import run_ranks  # noqa: E402  (needs torch)
from tests.dcp._workers import (  # noqa: E402
    blank_values,
    full_tensors,
    plain_values,
    state,
    suite,
)
from weightstore import BurnpackStore, Store, load_from  # noqa: E402
from weightstore.dcp import BurnpackStorageReader, BurnpackStorageWriter, open_dcp  # noqa: E402

WORLD_SIZE = 2


def as_torch(array: Any, dtype: Any) -> Any:
    """A NumPy array a reader returned as a tensor of `dtype` (bf16 through its bits)."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(array.view("u2").copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The suite's directory and each rank's records, after one run of the group."""
    root = tmp_path_factory.mktemp("dcp-group")
    with warnings.catch_warnings():  # a save with no process group says it assumes one process
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(
            state(full_tensors(), plain_values(), lambda name, tensor: tensor),
            storage_writer=BurnpackStorageWriter(root / "single"),
            no_dist=True,
        )
    run_ranks(suite, WORLD_SIZE, str(root))
    records = [json.loads((root / f"results-{rank}.json").read_text()) for rank in range(2)]
    return root, records


def _passed(records: list[dict[str, Any]], scenario: str) -> list[Any]:
    outcomes = [record.get(scenario, "not run") for record in records]
    for rank, outcome in enumerate(outcomes):
        assert not isinstance(outcome, str) or outcome == "ok", f"rank {rank}: {outcome}"
    return outcomes


def test_two_ranks_save_one_file_each_and_one_index(run: tuple[Path, list[Any]]) -> None:
    root, records = run
    _passed(records, "save_shard0")
    files = sorted(path.name for path in (root / "ckpt").iterdir())
    assert files[0] == "dcp.index.json" and len(files) == 3, files
    assert [name.split(".")[0] for name in files[1:]] == ["rank-00000", "rank-00001"]
    index = json.loads((root / "ckpt" / "dcp.index.json").read_text())
    chunks = index["tensors"]["model.w"]["chunks"]
    assert [c["offsets"] for c in chunks] == [[0, 0], [128, 0]]
    assert [c["sizes"] for c in chunks] == [[128, 128], [128, 128]]
    assert index["values"]["sched.betas"] == {"$tuple": [0.9, 0.999]}
    assert index["paths"]["sched.lr"] == ["sched", "lr"]


def test_rows_saved_load_as_columns(run: tuple[Path, list[Any]]) -> None:
    _passed(run[1], "load_shard1")


def test_rows_saved_load_replicated(run: tuple[Path, list[Any]]) -> None:
    _passed(run[1], "load_replicate")


def test_a_rank_reads_only_its_destination_bytes_and_headers(
    run: tuple[Path, list[Any]],
) -> None:
    for scenario in ("load_shard1", "load_shard0", "load_replicate"):
        for figures in _passed(run[1], scenario):
            assert figures["data_bytes"] == figures["destination_bytes"], (scenario, figures)
            assert figures["header_bytes"] < 4096 * figures["files"], (scenario, figures)
    columns = _passed(run[1], "load_shard1")[0]
    assert columns["data_bytes"] < 0.6 * columns["whole_chunk_bytes"]  # half of w and e


def test_one_rank_saved_two_load(run: tuple[Path, list[Any]]) -> None:
    _passed(run[1], "single_rank_saved")


def test_model_and_optimizer_through_get_state_dict(run: tuple[Path, list[Any]]) -> None:
    root, records = run
    _passed(records, "train_state")
    expected = torch.load(root / "train-expected.pt", weights_only=True)
    with open_dcp(str(root / "train")) as reader:  # whole tensors, no process group
        for name, tensor in expected["model"].items():
            assert torch.equal(as_torch(reader.get(f"model.{name}"), tensor.dtype), tensor), name
        values = reader.values()
    groups = expected["optim"]["param_groups"]
    assert values["optim.param_groups.0.lr"] == groups[0]["lr"] == 0.01
    assert values["optim.param_groups.0.betas"] == groups[0]["betas"]


def test_async_save_commits_like_save(run: tuple[Path, list[Any]]) -> None:
    root, records = run
    _passed(records, "async_save")
    assert (root / "async" / "dcp.index.json").is_file()


def test_full_tensors_in_one_process_without_a_group(run: tuple[Path, list[Any]]) -> None:
    root, records = run
    _passed(records, "save_shard0")
    full = full_tensors()
    with open_dcp(str(root / "ckpt")) as reader:  # put together from both ranks' chunks
        assert reader.names() == sorted(f"model.{name}" for name in full)
        for name, tensor in full.items():
            assert torch.equal(as_torch(reader.get(f"model.{name}"), tensor.dtype), tensor), name
        assert reader.values()["sched.table"] == ({1: "one", (2, 3): [4.5, float("inf")]},)
    target = state(
        {name: torch.zeros_like(t) for name, t in full.items()}, blank_values(), lambda n, t: t
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(target, storage_reader=BurnpackStorageReader(root / "ckpt"), no_dist=True)
    for name, tensor in full.items():
        assert torch.equal(target["model"][name], tensor), name
    assert target["sched"] == plain_values()["sched"]


def test_a_store_loads_a_module_from_the_directory(run: tuple[Path, list[Any]]) -> None:
    root, _ = run
    full = full_tensors()
    holder = torch.nn.Module()
    holder.model = torch.nn.Module()
    for name in ("w", "e", "b"):
        holder.model.register_parameter(name, torch.nn.Parameter(torch.zeros_like(full[name])))
    holder.model.register_buffer("step", torch.tensor(0))
    result = load_from(holder, BurnpackStore.from_file(root / "ckpt"))
    assert sorted(result.applied) == ["model.b", "model.e", "model.step", "model.w"]
    for name, tensor in holder.model.state_dict().items():
        assert torch.equal(tensor, full[name]), name
    assert isinstance(Store.from_file(root / "ckpt"), BurnpackStore)
