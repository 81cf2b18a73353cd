"""Sliced loads of integer-quantized checkpoints (compressed-tensors ``pack-quantized`` int4
and ``int-quantized`` int8): each rank's codes with their scales and zero points, a
dequantizing load reading about its share, and a split cutting packed words refused.

The checkpoint is packed here as compressed-tensors packs (`tests.quantized.test_hf_int`,
whose dequantization is checked bit for bit against compressed-tensors); the oracle of every
sliced value is the whole tensor's dequantization, sliced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("safetensors")

from safetensors.numpy import save_file

from tests.distributed._counting import counting_reads
from tests.quantized.test_hf_int import hand_parts
from weightstore import SafetensorsStore
from weightstore.distributed import chunk_bounds, load
from weightstore.errors import InvalidOptionError

ROWS, COLUMNS, GROUP = 1024, 4096, 128  # int4: 512 words a row, 32 scale groups a row
INT8_ROWS, INT8_COLUMNS = 384, 1024
PARTS = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("int") / "int.safetensors"
    int4, _ = hand_parts(rows=ROWS, cols=COLUMNS, gs=GROUP, bits=4, seed=3)
    rng = np.random.default_rng(4)
    tensors = {name.replace("m.", "q.", 1): array for name, array in int4.items()}
    tensors["w8.weight"] = rng.integers(-128, 128, (INT8_ROWS, INT8_COLUMNS)).astype(np.int8)
    tensors["w8.weight_scale"] = rng.uniform(0.001, 0.1, (INT8_ROWS, 1)).astype(np.float32)
    tensors["w8.input_scale"] = np.array([0.02], np.float32)
    save_file(tensors, str(path))
    return path


def _stored(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def _whole(path: Path) -> dict[str, np.ndarray]:
    store = SafetensorsStore.from_file(path).with_dequantize("f32")
    model = {
        "q": {"weight": np.zeros((ROWS, COLUMNS), np.float32)},
        "w8": {"weight": np.zeros((INT8_ROWS, INT8_COLUMNS), np.float32)},
    }
    assert store.apply_to(model).is_success()
    return {"q.weight": model["q"]["weight"], "w8.weight": model["w8"]["weight"]}


def _chunk(array: np.ndarray, dim: int, rank: int, world_size: int) -> np.ndarray:
    start, stop = chunk_bounds(array.shape[dim], rank, world_size)
    return array[(slice(None),) * dim + (slice(start, stop),)]


@pytest.mark.parametrize(("dim", "world_size"), [(0, 2), (0, 4), (1, 2), (1, 4)])
def test_each_rank_gets_its_words_scales_and_zero_point_words(
    checkpoint: Path, dim: int, world_size: int
) -> None:
    stored = _stored(checkpoint)
    for rank in range(world_size):
        codes = _chunk(stored["q.weight_packed"], dim, rank, world_size)
        scale = _chunk(stored["q.weight_scale"], dim, rank, world_size)
        zero = _chunk(stored["q.weight_zero_point"], dim, rank, world_size)  # 8 rows a word
        model: dict[str, Any] = {"q": {
            "weight_packed": np.zeros_like(codes), "weight_scale": np.zeros_like(scale),
            "weight_zero_point": np.zeros_like(zero), "weight_shape": np.zeros(2, np.int64),
        }}  # fmt: skip
        store = SafetensorsStore.from_file(checkpoint).with_regex(r"^q\.")
        plan = {r"^q\.weight_packed$": dim}
        result = load(store, model, plan, rank=rank, world_size=world_size)
        assert sorted(result.applied) == sorted(f"q.{part}" for part in PARTS)
        assert np.array_equal(model["q"]["weight_packed"], codes)
        assert np.array_equal(model["q"]["weight_scale"], scale)
        assert np.array_equal(model["q"]["weight_zero_point"], zero)
        assert model["q"]["weight_shape"].tolist() == [ROWS, COLUMNS]  # the tensor's, whole


@pytest.mark.parametrize("world_size", [2, 3])
def test_int8_rows_take_their_channel_scales_and_the_input_scale_whole(
    checkpoint: Path, world_size: int
) -> None:
    stored = _stored(checkpoint)
    for rank in range(world_size):
        codes = _chunk(stored["w8.weight"], 0, rank, world_size)
        model: dict[str, Any] = {"w8": {
            "weight": np.zeros_like(codes), "weight_scale": np.zeros((len(codes), 1), np.float32),
            "input_scale": np.zeros(1, np.float32),
        }}  # fmt: skip
        store = SafetensorsStore.from_file(checkpoint).with_regex(r"^w8\.")
        assert load(store, model, {r"^w8\.weight$": 0}, rank=rank, world_size=world_size)
        assert np.array_equal(model["w8"]["weight"], codes)
        assert np.array_equal(
            model["w8"]["weight_scale"], _chunk(stored["w8.weight_scale"], 0, rank, world_size)
        )
        assert np.array_equal(model["w8"]["input_scale"], stored["w8.input_scale"])


def test_a_row_split_cutting_packed_zero_point_words_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "odd.safetensors"
    parts, _ = hand_parts(rows=24, cols=64, gs=32, bits=4)  # 12 rows a rank: 8 rows a word
    save_file(parts, str(path))
    model: dict[str, Any] = {"m": {
        "weight_packed": np.zeros((12, 8), np.int32), "weight_scale": np.zeros((12, 2), np.float32),
        "weight_zero_point": np.zeros((2, 2), np.int32), "weight_shape": np.zeros(2, np.int64),
    }}  # fmt: skip
    with pytest.raises(InvalidOptionError) as caught:
        load(SafetensorsStore.from_file(path), model, {"weight_packed$": 0}, rank=1, world_size=2)
    assert str(caught.value) == (
        "tensor 'm.weight' (int-pack, blocks of 1x32): the slice [12:24] of dim 0 (size 24) "
        "cuts its blocks of 8; split where every rank's share is whole blocks of 8, or read "
        "it with with_dequantize"
    )


@pytest.mark.parametrize(("dim", "world_size"), [(0, 2), (0, 3), (1, 2), (1, 3)])
def test_a_dequantizing_load_reads_about_its_share(
    checkpoint: Path, dim: int, world_size: int
) -> None:
    stored, whole = _stored(checkpoint), _whole(checkpoint)
    with counting_reads() as opening:
        SafetensorsStore.from_file(checkpoint).keys()
    for name, prefix in (("q.weight", "q.weight_"), ("w8.weight", "w8.weight")):
        share = sum(a.nbytes for n, a in stored.items() if n.startswith(prefix)) / world_size
        for rank in range(world_size):
            want = _chunk(whole[name], dim, rank, world_size)
            module = name.split(".")[0]
            model = {module: {"weight": np.zeros_like(want)}}
            with counting_reads() as counter:
                store = SafetensorsStore.from_file(checkpoint).with_dequantize("f32")
                store = store.with_regex(f"^{module}\\.").allow_partial()
                load(store, model, {f"^{name}$": dim}, rank=rank, world_size=world_size)
            assert np.array_equal(model[module]["weight"], want), (name, rank)
            ratio = (counter.total - opening.total) / share
            print(f"{name} dim {dim} rank {rank}/{world_size}: {ratio:.3f}x its share")
            assert ratio < 1.1, (name, rank, ratio)
