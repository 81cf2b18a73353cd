"""Sliced dequantizing loads of quantized tensors stored as one tensor each: Burn QFloat in
burnpack and torch's quantized tensors in ``.pt`` files. Each rank's values equal the whole
tensor's, cut to its chunk, and come from the readers' ``get_dequantized_part``: a burnpack rank
reads about its share of the codes and scales; a torch rank converts only its share."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from tests.burnpack.test_qfloat import block_scales, build, random_codes, scheme
from tests.distributed._counting import counting_reads
from weightstore.burnpack import BurnpackReader, _reader
from weightstore.distributed import chunk_bounds, load
from weightstore.pytorch_reader import PytorchReader
from weightstore.stores import BurnpackStore, PytorchStore

ROWS, COLUMNS = 512, 2048  # Q4S packed 8 to a u32 word along the columns, blocks of 32


@pytest.fixture(scope="module")
def burn_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    codes = random_codes((ROWS, COLUMNS), "Q4S", seed=8)
    scales = block_scales((ROWS, COLUMNS), (32,), seed=9)
    quant = scheme("Q4S", {"PackedU32": 0}, block=(32,), block_dtype="F16")
    path = tmp_path_factory.mktemp("burn") / "q.bpk"
    path.write_bytes(build(codes, quant, scales, "F16")[1])
    return path


def chunk(array: np.ndarray[Any, Any], dim: int, rank: int, world_size: int) -> Any:
    start, stop = chunk_bounds(array.shape[dim], rank, world_size)
    return array[(slice(None),) * dim + (slice(start, stop),)]


@pytest.mark.parametrize(("dim", "world_size"), [(0, 2), (0, 3), (1, 2), (1, 4)])
def test_a_burn_rank_reads_about_its_share(burn_file: Path, dim: int, world_size: int) -> None:
    with BurnpackReader.from_file(burn_file) as reader:
        whole = reader.get_dequantized("q")
        nbytes = reader.descriptor("q").nbytes
    with counting_reads(_reader) as opening:
        BurnpackStore.from_file(burn_file).keys()
    for rank in range(world_size):
        want = chunk(whole, dim, rank, world_size)
        model = {"q": np.zeros_like(want)}
        with counting_reads(_reader) as counter:
            store = BurnpackStore.from_file(burn_file).with_dequantize("f32")
            assert load(store, model, {"^q$": dim}, rank=rank, world_size=world_size)
        assert np.array_equal(model["q"], want), rank
        ratio = (counter.total - opening.total) / (nbytes / world_size)
        print(f"burn Q4S dim {dim} rank {rank}/{world_size}: {ratio:.3f}x its share")
        assert 0.9 < ratio < 1.1, (rank, ratio)  # counted, and about its share


def test_a_torch_rank_converts_only_its_share(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    values = torch.randn(ROWS, 256, generator=torch.Generator().manual_seed(1))
    scales = torch.rand(ROWS, dtype=torch.float64) / 20 + 0.01
    zeros = torch.randint(-4, 4, (ROWS,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates its qint types
        qtensor = torch.quantize_per_channel(values, scales, zeros, 0, torch.qint8)
        torch.save({"fc.weight": qtensor}, tmp_path / "q.pt")
    whole = qtensor.dequantize().numpy()
    whole_calls = mock.patch.object(
        PytorchReader, "get_dequantized", side_effect=AssertionError("dequantized whole")
    )
    for dim, world_size in ((0, 4), (1, 2)):
        for rank in range(world_size):
            want = chunk(whole, dim, rank, world_size)
            model = {"fc": {"weight": np.zeros_like(want)}}
            store = PytorchStore.from_file(tmp_path / "q.pt").with_dequantize("f32")
            with whole_calls:
                assert load(store, model, {r"^fc\.weight$": dim}, rank=rank, world_size=world_size)
            assert np.array_equal(model["fc"]["weight"], want), (dim, rank)
