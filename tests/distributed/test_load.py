"""Sliced loads in one process, rank by rank (rank and world size given): what each rank
loads, what it reads, and what is refused. Real process groups are in test_process_groups.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.distributed._counting import counting_reads
from weightstore import SafetensorsStore, save_into
from weightstore.distributed import ShardPlan, chunk_bounds, load
from weightstore.distributed._load import _slice_load
from weightstore.errors import InvalidOptionError
from weightstore.stores import LoadFailedError

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.distributed._workers import (  # noqa: E402  (needs torch)
    PLAN,
    expected_local,
    full_state,
    local_mlp,
)


def _full_file(tmp_path: Path) -> Path:
    path = tmp_path / "full.safetensors"
    safetensors_torch.save_file(full_state(), path)  # written by the oracle
    return path


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_rank_of_a_plain_model_gets_its_chunk(tmp_path: Path, world_size: int) -> None:
    path = _full_file(tmp_path)
    for rank in range(world_size):
        model = local_mlp(rank, world_size)
        result = load(
            SafetensorsStore.from_file(path), model, PLAN, rank=rank, world_size=world_size
        )
        assert result.is_success() and len(result.applied) == 7
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, expected_local(name, rank, world_size)), (name, rank)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_slices_of_all_ranks_put_together_are_the_tensor(tmp_path: Path, dim: int) -> None:
    full = {"w": np.arange(7 * 5, dtype=np.float32).reshape(7, 5), "b": np.ones(3, np.float16)}
    save_into(full, SafetensorsStore.from_file(tmp_path / "m.safetensors"))
    pieces = []
    for rank in range(3):
        start, stop = chunk_bounds(full["w"].shape[dim], rank, 3)
        shape = list(full["w"].shape)
        shape[dim] = stop - start
        model = {"w": np.zeros(shape, np.float32), "b": np.zeros(3, np.float16)}
        store = SafetensorsStore.from_file(tmp_path / "m.safetensors")
        load(store, model, {"^w$": dim}, rank=rank, world_size=3)
        assert np.array_equal(model["b"], full["b"])  # replicated: whole on every rank
        pieces.append(model["w"])
    assert np.array_equal(np.concatenate(pieces, axis=dim), full["w"])


def test_a_set_loads_slices_as_a_single_file_does(tmp_path: Path) -> None:
    model = local_mlp(0, 1)
    model.load_state_dict(full_state())
    directory = tmp_path / "set"
    SafetensorsStore.from_file(directory).with_max_shard_size(300).collect_from(model)
    assert len(list(directory.glob("model-*.safetensors"))) > 2
    with counting_reads() as opening:  # every shard's header: a load reads them too
        SafetensorsStore.from_file(directory).keys()
    for rank in range(2):
        sliced = local_mlp(rank, 2)
        with counting_reads() as counter:
            load(SafetensorsStore.from_file(directory), sliced, PLAN, rank=rank, world_size=2)
        for name, tensor in sliced.state_dict().items():
            assert torch.equal(tensor, expected_local(name, rank, 2)), name
        local = sum(t.numel() * t.element_size() for t in sliced.state_dict().values())
        assert counter.total == opening.total + local  # only this rank's slices of the data


def test_a_pytorch_checkpoint_loads_slices_too(tmp_path: Path) -> None:
    from weightstore import PytorchStore

    torch.save(full_state(), tmp_path / "full.pt")
    model = local_mlp(1, 2)
    load(PytorchStore.from_file(tmp_path / "full.pt"), model, PLAN, rank=1, world_size=2)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected_local(name, 1, 2)), name


def test_the_plan_names_tensors_as_the_store_renames_them(tmp_path: Path) -> None:
    path = _full_file(tmp_path)
    store = SafetensorsStore.from_file(path).with_key_remapping(r"^fc1\.", "up.")
    model = {"up": {"weight": np.zeros((4, 6), np.float32)}}  # rows 0..3 of 7: rank 0 of 2
    result = load(store.allow_partial(), model, {r"^up\.weight$": 0}, rank=0, world_size=2)
    assert result.applied == ["up.weight"]
    assert np.array_equal(model["up"]["weight"], full_state()["fc1.weight"][:4].numpy())


def test_a_model_built_for_another_world_size_fails_with_the_shapes(tmp_path: Path) -> None:
    path = _full_file(tmp_path)
    with pytest.raises(LoadFailedError) as caught:
        load(SafetensorsStore.from_file(path), local_mlp(0, 2), PLAN, rank=0, world_size=4)
    errors = {error.path: error for error in caught.value.result.errors}
    assert sorted(errors) == ["embed.weight", "fc1.bias", "fc1.weight", "fc2.weight"]
    assert (errors["fc1.weight"].expected, errors["fc1.weight"].found) == ("(4, 6)", "(2, 6)")


@pytest.mark.parametrize(
    ("plan", "options", "found"),
    [
        ({r"^fc1\.bias$": 1}, {"rank": 0, "world_size": 2}, "tensor 'fc1.bias' of shape [7]"),
        (PLAN, {"rank": 0}, "give both rank and world_size"),
        (PLAN, {"rank": 2, "world_size": 2}, "rank 2 is not one of 2 ranks"),
        (PLAN, {}, "no default process group"),
    ],
)
def test_bad_plans_and_places_are_refused_before_anything_loads(
    tmp_path: Path, plan: Any, options: dict[str, int], found: str
) -> None:
    model = local_mlp(0, 2)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(InvalidOptionError) as caught:
        load(SafetensorsStore.from_file(_full_file(tmp_path)), model, plan, **options)
    assert found in str(caught.value)
    assert all(torch.equal(t, before[n]) for n, t in model.state_dict().items())


def test_a_load_that_is_no_reader_is_sliced_in_memory() -> None:
    whole = np.arange(12).reshape(3, 4)
    read = _slice_load(lambda: whole, (slice(None), slice(1, 3)))
    assert np.array_equal(read(), whole[:, 1:3]) and read().flags.c_contiguous


# -- bytes read ----------------------------------------------------------------------------------

LAYERS, WIDTH, FFN = 2, 256, 768
BLOCK_PLAN = ShardPlan({
    r"\.(q|k|v)_proj\.weight$": 0, r"\.up\.weight$": 0,  # column-parallel: rows split
    r"\.o_proj\.weight$": 1, r"\.down\.weight$": 1,  # row-parallel: columns split
})  # fmt: skip


def _block() -> dict[str, np.ndarray[Any, Any]]:
    """A two-layer transformer block's tensors (float32, 5 MiB), Megatron-style shapes."""
    rng = np.random.default_rng(0)
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in range(LAYERS):
        prefix = f"layers.{layer}"
        for proj in ("q", "k", "v", "o"):
            shapes[f"{prefix}.attn.{proj}_proj.weight"] = (WIDTH, WIDTH)
        shapes[f"{prefix}.mlp.up.weight"] = (FFN, WIDTH)
        shapes[f"{prefix}.mlp.down.weight"] = (WIDTH, FFN)
        shapes[f"{prefix}.norm.weight"] = (WIDTH,)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def _local_block(rank: int, world_size: int) -> dict[str, np.ndarray[Any, Any]]:
    model = {}
    for name, array in _block().items():
        dim = BLOCK_PLAN.dim_for(name)
        shape = list(array.shape)
        if dim is not None:
            start, stop = chunk_bounds(shape[dim], rank, world_size)
            shape[dim] = stop - start
        model[name] = np.zeros(shape, np.float32)
    return model


def bytes_per_rank(path: Path, world_size: int) -> list[dict[str, int]]:
    """What each rank reads of `path`, with its share of the split and replicated bytes."""
    with counting_reads() as opening:
        SafetensorsStore.from_file(path).keys()
    rows = []
    for rank in range(world_size):
        model = _local_block(rank, world_size)
        with counting_reads() as counter:
            result = load(
                SafetensorsStore.from_file(path), model, BLOCK_PLAN, rank=rank,
                world_size=world_size,
            )  # fmt: skip
        assert result.is_success()
        split = sum(a.nbytes for n, a in model.items() if BLOCK_PLAN.dim_for(n) is not None)
        replicated = sum(a.nbytes for n, a in model.items() if BLOCK_PLAN.dim_for(n) is None)
        rows.append({
            "rank": rank, "read": counter.total, "header": opening.total, "split": split,
            "replicated": replicated, "file": path.stat().st_size,
        })  # fmt: skip
    return rows


@pytest.mark.parametrize("world_size", [2, 4])
def test_each_rank_reads_its_share_of_split_tensors_and_the_replicated_ones(
    tmp_path: Path, world_size: int
) -> None:
    block = _block()
    path = tmp_path / "block.safetensors"
    save_into(block, SafetensorsStore.from_file(path))
    split_total = sum(a.nbytes for n, a in block.items() if BLOCK_PLAN.dim_for(n) is not None)
    for row in bytes_per_rank(path, world_size):
        assert row["read"] == row["header"] + row["split"] + row["replicated"], row
        assert row["split"] == split_total // world_size  # 256 and 768 divide evenly
        assert row["read"] < row["file"] / world_size + row["replicated"] + row["header"]
        print(
            f"world {world_size}: rank {row['rank']} read {row['read']:,} bytes of "
            f"{row['file']:,} (split tensors {row['split']:,}, replicated "
            f"{row['replicated']:,}, header {row['header']:,})"
        )
