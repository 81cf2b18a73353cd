"""Symmetric int8 and int4 groups of 32 columns into GGUF as Q8_0 and Q4_0 blocks, moved
byte for byte: the codes and float16 scales are the ones in the SafeTensors file, and
gguf-py decodes the GGUF file to weightstore's float32 dequantization of the group. Groups
ggml has no block for are refused naming why and ``--dequantize``, before anything is
written. The int4 packing is compressed-tensors' (`tests.quantized.test_hf_int`, checked
against compressed-tensors bit for bit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.quantized.test_hf_int import hand_parts
from weightstore import GgufStore, SafetensorsStore
from weightstore.errors import InvalidOptionError
from weightstore.gguf import GgufReader

RNG = np.random.default_rng(27)
ROWS, COLUMNS = 6, 128


def _int_pack(bits: int, **changes: Any) -> dict[str, np.ndarray]:
    parts, _ = hand_parts(rows=ROWS, cols=COLUMNS, gs=32, bits=bits, asymmetric=False, seed=bits)
    parts["m.weight_scale"] = parts["m.weight_scale"].astype(np.float16)
    parts.update(changes)
    return parts


def _int8(**changes: Any) -> dict[str, np.ndarray]:
    parts = {
        "m.weight": RNG.integers(-128, 128, (ROWS, COLUMNS)).astype(np.int8),
        # float32 scales that float16 holds exactly
        "m.weight_scale": RNG.uniform(0.001, 0.1, (ROWS, COLUMNS // 32)).astype(np.float16),
    }
    parts["m.weight_scale"] = parts["m.weight_scale"].astype(np.float32)
    parts.update(changes)
    return parts


def _save(path: Path, parts: dict[str, np.ndarray]) -> SafetensorsStore:
    nested: dict[str, Any] = {}
    for name, array in parts.items():
        module, leaf = name.split(".")
        nested.setdefault(module, {})[leaf] = array
    nested["norm"] = np.linspace(0, 1, 8, dtype=np.float32)
    SafetensorsStore.from_file(str(path)).collect_from(nested)
    return SafetensorsStore.from_file(str(path))


CASES = {
    "int4 pack g32": (lambda: _int_pack(4), "Q4_0", 18),
    "int8 pack g32": (lambda: _int_pack(8), "Q8_0", 34),
    "int8 g32 float32 scales": (_int8, "Q8_0", 34),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_group_becomes_ggml_blocks_of_its_own_codes_and_scales(
    tmp_path: Path, case: str
) -> None:
    make, ggml_type, block_bytes = CASES[case]
    parts = make()
    source = _save(tmp_path / "q.safetensors", parts)
    target = tmp_path / "q.gguf"
    GgufStore.from_file(str(target)).collect_from(source)
    with GgufReader.from_file(str(target)) as reader:
        assert sorted(reader.names()) == ["m.weight", "norm"]
        assert reader.descriptor("m.weight").ggml.name == ggml_type
        raw = np.asarray(reader.get_raw("m.weight")).reshape(ROWS, COLUMNS // 32, block_bytes)
        values = reader.get("m.weight")
    scale16 = parts["m.weight_scale"].astype(np.float16)
    assert raw[..., :2].tobytes() == scale16.view(np.uint8).tobytes()  # the same float16 d
    if case.startswith("int8 g32"):  # Q8_0: the int8 codes themselves, 32 a block
        assert raw[..., 2:].tobytes() == parts["m.weight"].tobytes()
    ours = source.with_dequantize("f32").get_tensor("m.weight")
    assert ours is not None
    np.testing.assert_array_equal(values, ours.to_numpy())


@pytest.mark.parametrize("case", sorted(CASES))
def test_gguf_py_decodes_the_blocks_to_our_values(tmp_path: Path, case: str) -> None:
    gguf = need("gguf")
    make, ggml_type, _ = CASES[case]
    source = _save(tmp_path / "q.safetensors", make())
    GgufStore.from_file(str(tmp_path / "q.gguf")).collect_from(source)
    (tensor,) = [
        t for t in gguf.GGUFReader(str(tmp_path / "q.gguf")).tensors if t.name == "m.weight"
    ]
    assert tensor.tensor_type == getattr(gguf.GGMLQuantizationType, ggml_type)
    values = gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type)
    ours = source.with_dequantize("f32").get_tensor("m.weight")
    assert ours is not None
    np.testing.assert_array_equal(values.reshape(ROWS, COLUMNS), ours.to_numpy())


def test_a_renamed_group_is_saved_under_its_new_name(tmp_path: Path) -> None:
    source = _save(tmp_path / "q.safetensors", _int_pack(4))
    renamed = source.with_key_remapping(r"^m\.", "layer.")
    GgufStore.from_file(str(tmp_path / "q.gguf")).collect_from(renamed)
    with GgufReader.from_file(str(tmp_path / "q.gguf")) as reader:
        assert sorted(reader.names()) == ["layer.weight", "norm"]
        assert reader.descriptor("layer.weight").ggml.name == "Q4_0"


REFUSED = {
    "asymmetric": (
        lambda: hand_parts(rows=ROWS, cols=COLUMNS, gs=32, bits=4)[0],
        "it is asymmetric (zero points), and Q8_0 and Q4_0 are symmetric",
    ),
    "groups of 64": (
        lambda: _int8(**{"m.weight_scale": np.ones((ROWS, 2), np.float16)}),
        "Q8_0 and Q4_0 hold groups of 32 along a row, and its scales cover 64 columns",
    ),
    "per channel": (
        lambda: _int8(**{"m.weight_scale": np.ones((ROWS, 1), np.float16)}),
        "Q8_0 and Q4_0 hold groups of 32 along a row, and its scales cover 128 columns",
    ),
    "scales float16 cannot hold": (
        lambda: _int8(**{"m.weight_scale": np.full((ROWS, 4), 0.1, np.float32)}),
        "its F32 scales are not all exact in float16, ggml's",
    ),
    "an input scale": (
        lambda: _int8(**{"m.input_scale": np.ones(1, np.float32)}),
        "its input_scale has no place in GGUF",
    ),
    "3-bit codes": (
        lambda: hand_parts(rows=ROWS, cols=COLUMNS, gs=32, bits=3, asymmetric=False)[0],
        "ggml has no block type for 3-bit codes",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_group_ggml_has_no_block_for_is_refused_naming_why(tmp_path: Path, case: str) -> None:
    make, why = REFUSED[case]
    source = _save(tmp_path / "q.safetensors", make())
    assert len(source.quantized_groups()) == 1
    target = tmp_path / "q.gguf"
    with pytest.raises(InvalidOptionError) as caught:
        GgufStore.from_file(str(target)).collect_from(source)
    assert why in str(caught.value)
    assert "(convert: --dequantize bf16)" in str(caught.value)
    assert caught.value.option == "dequantize" and not target.exists()
    GgufStore.from_file(str(target)).collect_from(source.with_dequantize("f32"))  # the way out
    with GgufReader.from_file(str(target)) as reader:
        assert reader.descriptor("m.weight").ggml.name == "F32"
