"""Sliced loads of quantized checkpoints: codes and scales sliced together, a dequantizing
load reading only the blocks around its slice, and the splits that cut blocks refused.
One process plays each rank here; `test_two_gloo_ranks_load_quantized_slices` runs two."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors.torch")

from tests._ranks import run_ranks  # noqa: E402
from tests.distributed import _quantized as q  # noqa: E402
from tests.distributed._counting import counting_reads  # noqa: E402
from weightstore import SafetensorsStore  # noqa: E402
from weightstore.distributed import chunk_bounds, load  # noqa: E402
from weightstore.errors import InvalidOptionError  # noqa: E402
from weightstore.quantized import QuantizedGroup  # noqa: E402
from weightstore.quantized._hf_slice import slice_group  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("q") / "q.safetensors"
    q.write_checkpoint(path)
    return path


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_each_rank_gets_its_codes_with_their_scales_and_its_values(
    checkpoint: Path, world_size: int
) -> None:
    for rank in range(world_size):  # 512 rows: 128 a rank over 4, on block edges
        read = q.check_rank(checkpoint, rank, world_size)
        assert read == q.share_read(checkpoint, rank, world_size)


def test_a_column_split_slices_the_scale_columns(tmp_path: Path) -> None:
    path = tmp_path / "q.safetensors"
    q.write_checkpoint(path, columns=q.COLUMNS)
    parts = q.stored(path)
    for rank in range(3):  # 384 columns over 3: 128 each, one scale column each
        model: dict[str, Any] = {
            "weight": np.zeros((q.ROWS, 128), parts["fc.weight"].dtype),
            "weight_scale_inv": np.zeros((4, 1), np.float32),
        }
        store = SafetensorsStore.from_file(path).with_regex(r"^fc\.weight")
        load(store, {"fc": model}, {r"^fc\.weight$": 1}, rank=rank, world_size=3)
        columns = slice(rank * 128, rank * 128 + 128)
        assert np.array_equal(
            model["weight"].view(np.uint8), parts["fc.weight"][:, columns].view(np.uint8)
        )
        assert np.array_equal(
            model["weight_scale_inv"], parts["fc.weight_scale_inv"][:, rank : rank + 1]
        )


def test_a_split_that_cuts_blocks_is_refused_naming_tensor_and_block(tmp_path: Path) -> None:
    path = tmp_path / "q.safetensors"
    q.write_checkpoint(path, rows=384)  # 192 rows a rank: rank 1 starts inside block 1
    store = SafetensorsStore.from_file(path).with_regex(r"^fc\.weight")
    model = {"fc": q.parts_model(0, 2)["fc"]}
    del model["fc"]["bias"]
    model["fc"]["weight"] = model["fc"]["weight"][:192]  # rows 0..191: 1.5 blocks, a partial
    load(store, model, {r"^fc\.weight$": 0}, rank=0, world_size=2)  # edge block is a block
    with pytest.raises(InvalidOptionError) as caught:
        load(store, model, {r"^fc\.weight$": 0}, rank=1, world_size=2)
    assert caught.value.option == "plan"
    assert str(caught.value) == (
        "tensor 'fc.weight' (fp8-block, blocks of 128x128): the slice [192:384] of dim 0 "
        "(size 384) cuts its blocks of 128; split where every rank's share is whole blocks "
        "of 128, or read it with with_dequantize"
    )


def test_splitting_a_scale_alone_or_an_mxfp4_block_is_refused(checkpoint: Path) -> None:
    store = SafetensorsStore.from_file(checkpoint)
    companion_alone = (
        r"splits 'fc.weight_scale_inv' \(scale of a quantized tensor\) on dim 0, but the "
        r"codes \('fc.weight'\) are not split"
    )
    with pytest.raises(InvalidOptionError, match=companion_alone):
        load(store, q.parts_model(0, 2), {r"_scale_inv$": 0}, rank=0, world_size=2)
    with pytest.raises(InvalidOptionError, match="16 bytes of each MXFP4 block"):
        load(store, q.parts_model(0, 2), {r"_blocks$": -1}, rank=0, world_size=2)


def test_a_layout_not_read_in_slices_is_refused_by_name() -> None:
    group = QuantizedGroup(
        name="w", layout="burn", codes="w", companions={}, logical_shape=(8, 8),
        block=(1, 8), rule="test",
    )  # fmt: skip
    with pytest.raises(InvalidOptionError, match="'w' is a burn quantized tensor"):
        slice_group(group, {}, ((0, 4), (0, 8)), enclose=False)


def test_a_dequantizing_load_reads_its_share_of_blocks_even_off_their_edges(
    tmp_path: Path,
) -> None:
    rows = 2800  # 1,400 rows a rank: rank 0 reads 11 blocks of rows, rank 1 the last 12
    path = tmp_path / "q.safetensors"
    q.write_checkpoint(path, rows=rows)
    whole = q.dequantized(path, q.FP8, rows)
    parts = q.stored(path)
    with counting_reads() as opening:
        SafetensorsStore.from_file(path).keys()
    for rank in range(2):
        model = {"fc": {"weight": np.zeros((1400, q.COLUMNS), np.float32)}}
        with counting_reads() as counter:
            store = SafetensorsStore.from_file(path).with_dequantize("f32").with_regex("^fc")
            load(store.allow_partial(), model, {r"^fc\.weight$": 0}, rank=rank, world_size=2)
        assert np.array_equal(model["fc"]["weight"], whole[rank * 1400 : rank * 1400 + 1400])
        share = (parts["fc.weight"].nbytes + parts["fc.weight_scale_inv"].nbytes) / 2
        ratio = (counter.total - opening.total) / share
        first = rank * 1400 // 128 * 128
        last = min(rows, -(-(rank * 1400 + 1400) // 128) * 128)
        scale_rows = -(-last // 128) - first // 128
        assert counter.total - opening.total == (last - first) * q.COLUMNS + scale_rows * 3 * 4
        assert ratio < 1.1, ratio
        print(f"rank {rank}: read {counter.total - opening.total:,} bytes, {ratio:.3f}x its share")


@pytest.mark.parametrize(("dim", "world_size"), [(1, 2), (1, 3), (-1, 3), (-1, 5)])
def test_values_off_block_edges_equal_the_whole_dequantization_sliced(
    checkpoint: Path, dim: int, world_size: int
) -> None:
    fp8, mx = q.dequantized(checkpoint, q.FP8), q.dequantized(checkpoint, q.MXFP4)
    store = SafetensorsStore.from_file(checkpoint).with_dequantize("f32")
    for rank in range(world_size):
        plan = {r"^fc\.weight$": dim, r"^experts\.down$": dim}
        model = {
            "fc": {"weight": np.zeros(_local(fp8.shape, dim, rank, world_size), np.float32)},
            "experts": {"down": np.zeros(_local(mx.shape, dim, rank, world_size), np.float32)},
        }
        load(store.allow_partial(), model, plan, rank=rank, world_size=world_size)
        assert np.array_equal(model["fc"]["weight"], q.chunk_of(fp8, dim % 2, rank, world_size))
        want = q.chunk_of(mx, dim % 3, rank, world_size)
        assert np.array_equal(model["experts"]["down"], want, equal_nan=True)


def _local(shape: tuple[int, ...], dim: int, rank: int, world_size: int) -> tuple[int, ...]:
    dim %= len(shape)
    start, stop = chunk_bounds(shape[dim], rank, world_size)
    return (*shape[:dim], stop - start, *shape[dim + 1 :])


def _gloo_rank(rank: int, world_size: int, run: str) -> None:
    path = Path(run) / "q.safetensors"
    read = q.check_rank(path, rank, world_size, grouped=True)
    model = torch.nn.ModuleDict({"fc": _Fp8Linear(q.ROWS // 2, q.COLUMNS)})  # a torch model too
    store = SafetensorsStore.from_file(path).with_regex(r"^fc\.weight")
    assert load(store, model, {r"^fc\.weight$": 0}).is_success()  # place: the process group
    scale = torch.from_numpy(q.stored(path)["fc.weight_scale_inv"])
    assert torch.equal(model.fc.weight_scale_inv, scale[rank * 2 : rank * 2 + 2])
    (Path(run) / f"q-{rank}.json").write_text(json.dumps(read))


def test_two_gloo_ranks_load_quantized_slices(tmp_path: Path) -> None:
    path = tmp_path / "q.safetensors"
    q.write_checkpoint(path)
    run_ranks(_gloo_rank, 2, str(tmp_path))  # each rank checks its values and raises if off
    for rank in (0, 1):
        read = json.loads((tmp_path / f"q-{rank}.json").read_text())
        assert read == q.share_read(path, rank, 2), rank


class _Fp8Linear(torch.nn.Module):
    """A linear layer holding FP8 codes and their block scales, as FP8 inference kernels
    take them (a rank's rows or columns of each)."""

    def __init__(self, rows: int, columns: int) -> None:
        super().__init__()
        codes = torch.zeros(rows, columns, dtype=torch.float8_e4m3fn)
        scale = torch.zeros(-(-rows // 128), -(-columns // 128))
        self.weight = torch.nn.Parameter(codes, requires_grad=False)
        self.weight_scale_inv = torch.nn.Parameter(scale, requires_grad=False)


@pytest.mark.parametrize("dim", [0, 1])
def test_a_torch_model_of_fp8_parameters_loads_its_rows_or_columns(
    checkpoint: Path, dim: int
) -> None:
    parts = q.stored(checkpoint)
    codes = torch.from_numpy(parts["fc.weight"].view(np.uint8)).view(torch.float8_e4m3fn)
    scale = torch.from_numpy(parts["fc.weight_scale_inv"])
    world_size = 2 if dim == 0 else 3  # 256 rows a rank, or 128 columns
    for rank in range(world_size):
        shape = [q.ROWS, q.COLUMNS]
        shape[dim] //= world_size
        model = torch.nn.ModuleDict({"fc": _Fp8Linear(*shape)})
        store = SafetensorsStore.from_file(checkpoint).with_regex(r"^fc\.weight")
        result = load(store, model, {r"^fc\.weight$": dim}, rank=rank, world_size=world_size)
        assert result.applied == ["fc.weight", "fc.weight_scale_inv"]
        want_codes = torch.chunk(codes, world_size, dim)[rank]
        want_scale = torch.chunk(scale, world_size, dim)[rank]
        assert torch.equal(model.fc.weight.view(torch.uint8), want_codes.view(torch.uint8))
        assert model.fc.weight.dtype == torch.float8_e4m3fn
        assert torch.equal(model.fc.weight_scale_inv, want_scale)
