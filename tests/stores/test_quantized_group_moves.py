"""Quantized groups move whole through a store: remaps carry companions with their codes,
filters that split a group are refused on load and on save, copies into SafeTensors, burnpack
and sharded sets keep every part byte for byte and stay groups (the config travels as a
metadata pair), saves that cannot hold a group are refused naming ``--dequantize``, and broken
configs or inconsistent groups fail at first read with typed errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests._optional import need
from tests.stores.test_quantized_groups import BF16, LAYOUTS, floats, fp8, write
from weightstore.errors import (
    InvalidOptionError,
    MetadataError,
    QuantizedLayoutError,
    RemapCollisionError,
)
from weightstore.stores import BurnpackStore, GgufStore, PytorchStore, SafetensorsStore

FP8_CONFIG = {"quant_method": "fp8", "weight_block_size": [128, 128]}


@pytest.fixture
def fp8_file(tmp_path: Path) -> Path:
    """``fc`` FP8 with block scales and an activation scale, beside a plain ``norm``."""
    return write(
        tmp_path / "src",
        {
            "fc.weight": fp8((300, 200)),
            "fc.weight_scale_inv": floats((3, 2)),
            "fc.input_scale": floats((1,)),
            "norm.weight": floats((5,), BF16),
        },
        FP8_CONFIG,
    )


# -- remaps ---------------------------------------------------------------------------------


def test_renaming_the_codes_renames_their_companions(fp8_file: Path) -> None:
    store = SafetensorsStore.from_file(fp8_file).with_key_remapping(r"^fc\.weight$", "proj.weight")
    assert store.keys() == [
        "norm.weight", "proj.input_scale", "proj.weight", "proj.weight_scale_inv",
    ]  # fmt: skip
    dequantized = store.with_dequantize("bf16")
    assert dequantized.keys() == ["norm.weight", "proj.weight"]
    model = {"proj.weight": np.zeros((300, 200), BF16), "norm.weight": np.zeros(5, BF16)}
    assert dequantized.apply_to(model).quantized == {"proj.weight": "fp8-block"}


def test_a_prefix_remap_moves_every_part(fp8_file: Path) -> None:
    store = SafetensorsStore.from_file(fp8_file).with_key_remapping(r"^fc\.", "layers.0.fc.")
    keys = store.keys()
    assert [k for k in keys if k.startswith("layers.0.fc.")] == [
        "layers.0.fc.input_scale", "layers.0.fc.weight", "layers.0.fc.weight_scale_inv",
    ]  # fmt: skip


def test_a_companion_the_remapper_renames_keeps_that_name(fp8_file: Path) -> None:
    store = (
        SafetensorsStore.from_file(fp8_file)
        .with_key_remapping(r"^fc\.weight$", "proj.weight")
        .with_key_remapping(r"^fc\.weight_scale_inv$", "scales.proj")
    )
    assert store.keys() == ["norm.weight", "proj.input_scale", "proj.weight", "scales.proj"]
    snapshot = store.get_tensor("scales.proj")
    assert snapshot is not None and snapshot.group is not None
    assert snapshot.group.role == "scale"


def test_a_carried_name_landing_on_another_tensor_is_refused(fp8_file: Path) -> None:
    store = SafetensorsStore.from_file(fp8_file).with_key_remapping(r"^fc\.weight$", "norm.w")
    store = store.with_key_remapping(r"^norm\.weight$", "norm.w_scale_inv")
    with pytest.raises(RemapCollisionError):
        store.keys()


# -- filters --------------------------------------------------------------------------------


def test_a_filter_splitting_a_group_is_refused_on_load(fp8_file: Path) -> None:
    model = {"fc.weight": np.full((300, 200), 2, BF16)}
    store = SafetensorsStore.from_file(fp8_file).with_regex(r"^fc\.weight$")
    with pytest.raises(InvalidOptionError) as caught:
        store.apply_to(model)
    assert "'fc.weight'" in str(caught.value) and "fc.input_scale" in str(caught.value)
    assert (model["fc.weight"] == 2).all()


def test_a_filter_splitting_a_group_is_refused_on_save(fp8_file: Path, tmp_path: Path) -> None:
    target = SafetensorsStore.from_file(tmp_path / "out.safetensors").with_regex(r"weight$")
    with pytest.raises(InvalidOptionError) as caught:
        target.collect_from(SafetensorsStore.from_file(fp8_file))
    text = str(caught.value)
    assert "'fc.weight'" in text and "'fc.input_scale'" in text and "fp8-block" in text
    assert not (tmp_path / "out.safetensors").exists()


def test_a_filter_keeping_whole_groups_or_logical_names_loads(fp8_file: Path) -> None:
    store = SafetensorsStore.from_file(fp8_file)
    assert store.with_regex(r"^norm").apply_to({"norm.weight": np.zeros(5, BF16)}).is_success()
    model = {"fc.weight": np.zeros((300, 200), BF16)}
    result = store.with_dequantize("bf16").with_regex(r"^fc\.").apply_to(model)
    assert result.is_success() and result.quantized == {"fc.weight": "fp8-block"}


# -- copies ---------------------------------------------------------------------------------


def stored_bytes(store: Any) -> dict[str, bytes]:
    reader = store.reader()
    names = store.keys()
    return {name: reader.get(name).tobytes() for name in names}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_copy_keeps_every_part_and_every_group(layout: str, tmp_path: Path) -> None:
    tensors, config, _ = LAYOUTS[layout]
    source = SafetensorsStore.from_file(write(tmp_path / "src", tensors, config))
    copy_path = tmp_path / "elsewhere" / "copy.safetensors"  # no config.json beside it
    copy_path.parent.mkdir()
    SafetensorsStore.from_file(copy_path).collect_from(source)
    copy = SafetensorsStore.from_file(copy_path)
    assert stored_bytes(copy) == stored_bytes(source)
    assert copy.quantized_groups() == source.quantized_groups()
    carried = copy.read_metadata().get("quantization_config")
    assert (json.loads(carried) if carried else None) == config


def test_a_copy_keeps_a_block_size_the_scale_grid_does_not_imply(tmp_path: Path) -> None:
    """64x64 blocks on 300 rows give 5 block rows, which names alone read as 60-row blocks:
    only the carried config keeps the values."""
    config = {"quant_method": "fp8", "weight_block_size": [64, 64]}
    tensors = {"fc.weight": fp8((300, 200)), "fc.weight_scale_inv": floats((5, 4))}
    source = SafetensorsStore.from_file(write(tmp_path / "src", tensors, config))
    copy_path = tmp_path / "copy.safetensors"
    SafetensorsStore.from_file(copy_path).collect_from(source)
    [group] = SafetensorsStore.from_file(copy_path).quantized_groups()
    assert group.block == (64, 64)
    bare = tmp_path / "bare" / "model.safetensors"  # the same tensors, written without config
    write(bare.parent, tensors)
    [guessed] = SafetensorsStore.from_file(bare).quantized_groups()
    assert guessed.block == (60, 50) and guessed.rule.startswith("names:")


def test_a_burnpack_copy_keeps_the_parts_and_groups(tmp_path: Path) -> None:
    for layout in ("mxfp4", "int8", "int-pack"):  # burnpack holds no F8 dtype
        tensors, config, _ = LAYOUTS[layout]
        source = SafetensorsStore.from_file(write(tmp_path / layout, tensors, config))
        target = tmp_path / f"{layout}.bpk"
        BurnpackStore.from_file(target).collect_from(source)
        copy = BurnpackStore.from_file(target)
        assert stored_bytes(copy) == stored_bytes(source)
        assert copy.quantized_groups() == source.quantized_groups()


def test_an_f8_group_into_burnpack_is_refused_naming_the_tensor(
    fp8_file: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        BurnpackStore.from_file(tmp_path / "x.bpk").collect_from(
            SafetensorsStore.from_file(fp8_file)
        )
    assert str(caught.value) == (
        "'fc.weight' is the codes of a fp8-block quantized tensor ('fc.weight'), and dtype "
        "F8_E4M3 cannot be stored in burnpack: read the source with .with_dequantize('bf16') "
        "(convert: --dequantize bf16) to save its values"
    )
    assert caught.value.option == "dequantize" and not (tmp_path / "x.bpk").exists()


def test_a_sharded_copy_whose_groups_straddle_shards_loads_dequantized(
    fp8_file: Path, tmp_path: Path
) -> None:
    source = SafetensorsStore.from_file(fp8_file)
    directory = tmp_path / "set"
    SafetensorsStore.from_file(directory).with_max_shard_size(50_000).collect_from(source)
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    shards = index["weight_map"]
    assert shards["fc.weight"] != shards["fc.weight_scale_inv"]  # the group straddles
    copy = SafetensorsStore.from_file(directory)
    assert copy.quantized_groups() == source.quantized_groups()
    model = {"fc.weight": np.zeros((300, 200), BF16), "norm.weight": np.zeros(5, BF16)}
    assert copy.with_dequantize("bf16").with_regex("weight$").apply_to(model).is_success()
    expected = source.with_dequantize("bf16").get_tensor("fc.weight")
    assert expected is not None
    assert np.array_equal(model["fc.weight"].view(np.uint16), expected.to_numpy().view(np.uint16))
    # a filter naming the codes alone reads their module whole, so the split is refused
    with pytest.raises(InvalidOptionError, match=r"keeps 'fc\.weight' and drops 'fc\."):
        SafetensorsStore.from_file(directory).with_regex(r"^fc\.weight$").apply_to(model)


def test_a_sharded_mxfp4_group_filtered_by_its_logical_name_loads(tmp_path: Path) -> None:
    tensors, _, _ = LAYOUTS["mxfp4"]
    directory = tmp_path / "set"
    big = {**tensors, "z.weight": floats((3000,))}  # the group in one shard, z in another
    SafetensorsStore.from_file(directory).with_max_shard_size(2_000).collect_from(big)
    store = SafetensorsStore.from_file(directory).with_dequantize("f32")
    model = {"e.gate_up_proj": np.zeros((2, 4, 96), np.float32)}
    result = store.with_regex(r"^e\.gate_up_proj$").apply_to(model)
    assert result.is_success() and result.quantized == {"e.gate_up_proj": "mxfp4"}
    expected = (
        SafetensorsStore.from_file(directory).with_dequantize("f32").get_tensor("e.gate_up_proj")
    )
    assert expected is not None and np.array_equal(model["e.gate_up_proj"], expected.to_numpy())


# -- saves that cannot hold a group ------------------------------------------------------------


def test_a_group_into_gguf_is_refused_naming_dequantize(fp8_file: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="--dequantize") as caught:
        GgufStore.from_file(tmp_path / "x.gguf").collect_from(SafetensorsStore.from_file(fp8_file))
    assert "fp8-block" in str(caught.value) and not (tmp_path / "x.gguf").exists()
    dequantized = SafetensorsStore.from_file(fp8_file).with_dequantize("f32")
    GgufStore.from_file(tmp_path / "y.gguf").with_regex(r"weight$").collect_from(dequantized)
    assert GgufStore.from_file(tmp_path / "y.gguf").keys() == ["fc.weight", "norm.weight"]


def test_a_torch_quantized_tensor_saved_without_dequantize_is_refused(tmp_path: Path) -> None:
    torch = need("torch")
    path = tmp_path / "q.pt"
    qtensor = torch.quantize_per_tensor(torch.randn(4, 4), 0.1, 0, torch.qint8)
    torch.save({"w": qtensor}, path)
    with pytest.raises(InvalidOptionError, match="--dequantize") as caught:
        SafetensorsStore.from_file(tmp_path / "w.safetensors").collect_from(
            PytorchStore.from_file(path)
        )
    assert "'w'" in str(caught.value) and "torch quantized tensor" in str(caught.value)
    SafetensorsStore.from_file(tmp_path / "w.safetensors").collect_from(
        PytorchStore.from_file(path).with_dequantize("f32")
    )
    saved = SafetensorsStore.from_file(tmp_path / "w.safetensors").reader().get("w")
    assert np.array_equal(saved, qtensor.dequantize().numpy())


# -- broken sources -------------------------------------------------------------------------


def test_a_config_json_that_is_not_json_is_a_metadata_error(fp8_file: Path) -> None:
    (fp8_file.parent / "config.json").write_text("{not json")
    with pytest.raises(MetadataError) as caught:
        SafetensorsStore.from_file(fp8_file).keys()
    assert "config.json" in str(caught.value)


def test_an_inconsistent_group_fails_at_first_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {"fc.weight": fp8((300, 200)), "fc.weight_scale_inv": floats((3, 3))},
        FP8_CONFIG,
    )
    store = SafetensorsStore.from_file(path)
    with pytest.raises(QuantizedLayoutError) as caught:
        store.keys()
    error = caught.value
    assert (error.codes, error.companion) == ("fc.weight", "fc.weight_scale_inv")
    assert "fc.weight_scale_inv" in str(error) and str(path) in str(error)
    with pytest.raises(QuantizedLayoutError):
        store.with_dequantize("bf16").apply_to({"fc.weight": np.zeros((300, 200), BF16)})


def test_an_int8_pair_is_no_longer_plain_without_a_config(tmp_path: Path) -> None:
    """Raw int8 codes beside their scale once loaded as weights into an int8 parameter."""
    codes = np.arange(-64, 64, dtype=np.int8).reshape(2, 64)
    scale = np.array([[0.5], [0.25]], ml_dtypes.bfloat16)
    path = write(tmp_path, {"m.weight": codes, "m.weight_scale": scale})
    with pytest.raises(Exception, match="int8"):
        SafetensorsStore.from_file(path).apply_to({"m.weight": np.zeros((2, 64), BF16)})
    model = {"m.weight": np.zeros((2, 64), np.float32)}
    assert SafetensorsStore.from_file(path).with_dequantize("f32").apply_to(model).is_success()
    assert np.array_equal(model["m.weight"], codes.astype(np.float32) * scale.astype(np.float32))


# -- convert --------------------------------------------------------------------------------


def test_convert_refuses_a_group_into_gguf_and_dequantizes_on_request(
    fp8_file: Path, tmp_path: Path
) -> None:
    from tests.cli._support import assert_error, run_cli

    done = run_cli("convert", fp8_file, tmp_path / "x.gguf")
    assert_error(done, 2, "fp8-block", "--dequantize bf16")
    done = run_cli("convert", fp8_file, tmp_path / "y.safetensors", "--dequantize", "bf16")
    assert done.returncode == 0, done.stderr
    copy = SafetensorsStore.from_file(tmp_path / "y.safetensors")
    assert copy.keys() == ["fc.weight", "norm.weight"] and copy.quantized_groups() == []
    expected = SafetensorsStore.from_file(fp8_file).with_dequantize("bf16").get_tensor("fc.weight")
    assert expected is not None
    got = copy.reader().get("fc.weight")
    assert got.dtype == BF16 and np.array_equal(
        got.view(np.uint16), expected.to_numpy().view(np.uint16)
    )
