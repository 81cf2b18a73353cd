"""The command line over quantized tensors stored as several: convert --dequantize, inspect, diff.

Every file is written here: an FP8 block-scaled layer (F8_E4M3 codes, ml_dtypes) with the
``config.json`` that names its block, a gpt-oss MXFP4 pair found by its names, and a torch
quantized tensor. Values are checked against `weightstore.quantized.dequantize_group` and
against the layouts' arithmetic written out here (codes times their block's scale); copies
are checked byte for byte, part by part.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.cli._support import assert_error, read_weights, run_cli
from weightstore import SafetensorsStore, open_reader, safetensors
from weightstore.cli import _convert
from weightstore.cli import main as cli_main
from weightstore.entry import TensorEntry
from weightstore.quantized import dequantize_group
from weightstore.stores import Store

ml_dtypes = pytest.importorskip("ml_dtypes", reason="F8_E4M3 codes are ml_dtypes' float8")

FP8_CONFIG = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def _write(path: Path, arrays: dict[str, np.ndarray[Any, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [TensorEntry.from_array(n, a) for n, a in arrays.items()]
    safetensors.write_file(path, entries, overwrite=True)
    return path


def fp8_arrays(seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    """A 256 x 256 FP8 layer in 128 x 128 blocks (four scales) and a float norm."""
    rng = np.random.default_rng(seed)
    return {
        "layer.weight": rng.standard_normal((256, 256)).astype(ml_dtypes.float8_e4m3fn),
        "layer.weight_scale_inv": rng.uniform(0.5, 2.0, (2, 2)).astype(np.float32),
        "norm.weight": rng.standard_normal(8).astype(np.float32),
    }


def write_fp8(directory: Path, arrays: dict[str, np.ndarray[Any, Any]] | None = None) -> Path:
    path = _write(directory / "model.safetensors", arrays or fp8_arrays())
    (directory / "config.json").write_text(json.dumps(FP8_CONFIG))
    return path


def fp8_oracle(arrays: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """Each code times the scale of its 128 x 128 block, in float32."""
    scales = np.kron(arrays["layer.weight_scale_inv"], np.ones((128, 128), np.float32))
    return arrays["layer.weight"].astype(np.float32) * scales


def write_mxfp4(directory: Path) -> tuple[Path, dict[str, np.ndarray[Any, Any]]]:
    """Two experts of 4 rows of 64 values (two 32-value blocks a row), by names alone."""
    rng = np.random.default_rng(1)
    arrays = {
        "experts.down_proj_blocks": rng.integers(0, 256, (2, 4, 2, 16), dtype=np.uint8),
        "experts.down_proj_scales": rng.integers(120, 132, (2, 4, 2), dtype=np.uint8),
        "norm.weight": np.ones(4, np.float32),
    }
    return _write(directory / "model.safetensors", arrays), arrays


def mxfp4_oracle(arrays: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """Low nibble first, each value times 2 ** (scale - 127)."""
    blocks = arrays["experts.down_proj_blocks"]
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(2, 4, 2, 32)
    scales = np.ldexp(np.float32(1), arrays["experts.down_proj_scales"].astype(np.int32) - 127)
    return (E2M1[codes] * scales[..., None]).reshape(2, 4, 64)


def oracle_of(path: Path, name: str, dtype: Any = np.float32) -> np.ndarray[Any, Any]:
    """`dequantize_group` over the group `name` of the file at `path`, as the store finds it."""
    group = next(g for g in Store.from_file(path).quantized_groups() if g.name == name)
    with open_reader(path) as reader:
        parts = {part: np.array(reader.get(part)) for part in group.parts}
    return dequantize_group(group, parts, dtype)


def stored_bytes(path: Path) -> dict[str, bytes]:
    with open_reader(path) as reader:
        return {name: np.array(reader.get(name)).tobytes() for name in reader.names()}


# -- convert ------------------------------------------------------------------------------------


def test_convert_dequantize_f32_writes_the_values_under_the_logical_name(tmp_path: Path) -> None:
    arrays = fp8_arrays()
    src = write_fp8(tmp_path / "fp8", arrays)
    dst = tmp_path / "plain.safetensors"
    done = run_cli("convert", src, dst, "--dequantize", "f32")
    assert done.returncode == 0, done.stderr
    assert "2 tensors" in done.stdout
    written = read_weights(dst)
    assert sorted(written) == ["layer.weight", "norm.weight"]
    assert written["layer.weight"].dtype == np.float32
    np.testing.assert_array_equal(written["layer.weight"], oracle_of(src, "layer.weight"))
    np.testing.assert_array_equal(written["layer.weight"], fp8_oracle(arrays))
    np.testing.assert_array_equal(written["norm.weight"], arrays["norm.weight"])


@pytest.mark.parametrize("suffix", [".bpk", ".safetensors"])
def test_convert_dequantize_bf16_into_each_format(tmp_path: Path, suffix: str) -> None:
    src = write_fp8(tmp_path / "fp8")
    dst = tmp_path / f"plain{suffix}"
    assert run_cli("convert", src, dst, "--dequantize", "BF16").returncode == 0
    written = read_weights(dst)["layer.weight"]
    expected = oracle_of(src, "layer.weight", ml_dtypes.bfloat16)
    assert written.dtype == expected.dtype == ml_dtypes.bfloat16
    assert written.tobytes() == expected.tobytes()


def test_convert_dequantize_mxfp4(tmp_path: Path) -> None:
    src, arrays = write_mxfp4(tmp_path / "mx")
    dst = tmp_path / "plain.safetensors"
    assert run_cli("convert", src, dst, "--dequantize", "f32").returncode == 0
    written = read_weights(dst)
    assert sorted(written) == ["experts.down_proj", "norm.weight"]
    np.testing.assert_array_equal(written["experts.down_proj"], mxfp4_oracle(arrays))
    np.testing.assert_array_equal(written["experts.down_proj"], oracle_of(src, "experts.down_proj"))


@pytest.mark.parametrize(
    ("layout", "target"),
    [
        ("fp8", "copy.safetensors"),
        ("fp8", "set_dir"),
        ("mxfp4", "copy.safetensors"),
        ("mxfp4", "copy.bpk"),
        ("mxfp4", "set_dir"),
    ],
)
def test_convert_without_dequantize_keeps_every_part(
    tmp_path: Path, target: str, layout: str
) -> None:
    src = write_fp8(tmp_path / "q") if layout == "fp8" else write_mxfp4(tmp_path / "q")[0]
    dst = tmp_path / "out" / target
    dst.parent.mkdir()
    shards = ["--max-shard-size", "20KB"] if target == "set_dir" else []
    done = run_cli("convert", src, dst, *shards)
    assert done.returncode == 0, done.stderr
    before, after = stored_bytes(src), stored_bytes(dst)
    assert sorted(after) == sorted(before)
    for name, data in before.items():
        assert after[name] == data, name
    with open_reader(dst) as reader, open_reader(src) as original:
        for name in before:
            assert reader.descriptor(name).dtype == original.descriptor(name).dtype


def test_fp8_codes_into_burnpack_need_dequantize(tmp_path: Path) -> None:
    src = write_fp8(tmp_path / "fp8")
    dst = tmp_path / "out.bpk"
    assert_error(  # Burn has no FP8 dtype
        run_cli("convert", src, dst), 2, "F8_E4M3", "burnpack", "fp8-block", "--dequantize"
    )
    assert not dst.exists()
    assert run_cli("convert", src, dst, "--dequantize", "f32").returncode == 0
    np.testing.assert_array_equal(read_weights(dst)["layer.weight"], oracle_of(src, "layer.weight"))


def test_convert_to_gguf_needs_dequantize(tmp_path: Path) -> None:
    src = write_fp8(tmp_path / "fp8")
    dst = tmp_path / "out.gguf"
    assert_error(run_cli("convert", src, dst), 2, "fp8-block", "--dequantize")
    assert not dst.exists()
    assert run_cli("convert", src, dst, "--dequantize", "f32").returncode == 0
    with open_reader(dst) as reader:
        np.testing.assert_array_equal(reader.get("layer.weight"), oracle_of(src, "layer.weight"))


def _quantized_pt(path: Path) -> Any:
    torch = need("torch")
    torch.manual_seed(0)
    codes = torch.quantize_per_tensor(torch.randn(4, 6), 0.1, 3, torch.qint8)
    torch.save({"q.weight": codes, "bias": torch.arange(3.0)}, path)
    return codes


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_convert_a_torch_quantized_tensor(tmp_path: Path) -> None:
    src = tmp_path / "q.pt"
    codes = _quantized_pt(src)
    dst = tmp_path / "out.safetensors"
    assert_error(run_cli("convert", src, dst), 2, "torch quantized tensor", "--dequantize")
    assert not dst.exists()
    done = run_cli("convert", src, dst, "--dequantize", "f32")
    assert done.returncode == 0, done.stderr
    written = read_weights(dst)
    np.testing.assert_array_equal(written["q.weight"], codes.dequantize().numpy())
    np.testing.assert_array_equal(written["bias"], np.arange(3, dtype=np.float32))


def test_convert_dequantize_counts_every_value_on_the_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int]] = []  # (total, bytes advanced) per bar

    class Recorder:
        def __init__(self, total: int, description: str, *, quiet: bool) -> None:
            self.total, self.done = total, 0

        def advance(self, nbytes: int) -> None:
            self.done += nbytes

        def __enter__(self) -> Recorder:
            return self

        def __exit__(self, *exc: object) -> None:
            seen.append((self.total, self.done))

    monkeypatch.setattr(_convert, "Progress", Recorder)
    src = write_fp8(tmp_path / "fp8")
    code = cli_main(["convert", str(src), str(tmp_path / "o.bpk"), "--dequantize", "bf16"])
    assert code == 0
    assert seen == [(256 * 256 * 2 + 8 * 4,) * 2]  # the bf16 layer and the f32 norm


def test_convert_rejects_another_dequantize_dtype(tmp_path: Path) -> None:
    src = write_fp8(tmp_path / "fp8")
    done = run_cli("convert", src, tmp_path / "o.bpk", "--dequantize", "i8")
    assert done.returncode == 2 and "--dequantize" in done.stderr


# -- inspect ------------------------------------------------------------------------------------


def test_inspect_lists_a_group_once_with_its_parts(tmp_path: Path) -> None:
    src = write_fp8(tmp_path / "fp8")
    done = run_cli("inspect", src)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    group = next(line for line in lines if line.startswith("layer.weight "))
    assert group.split() == ["layer.weight", "fp8-block", "[256,", "256]", "65,552"]
    at = lines.index(group)
    assert lines[at + 1] == "    rule: quantization_config: fp8 block 128x128; block 128x128"
    assert lines[at + 2].split() == ["layer.weight", "codes", "F8_E4M3", "[256,", "256]", "65,536"]
    assert lines[at + 3].split() == ["layer.weight_scale_inv", "scale", "F32", "[2,", "2]", "16"]
    assert lines[at + 2].startswith("    ")
    plain = [line.split()[0] for line in lines[lines.index("") + 1 : at - 1] if line]
    assert plain == ["name", "norm.weight"]  # parts are listed under their group only
    assert "quantized: 1 tensor stored as 2 parts, 65,552 bytes" in lines


def test_inspect_json_has_a_quantized_list(tmp_path: Path) -> None:
    src, _ = write_mxfp4(tmp_path / "mx")
    document = json.loads(run_cli("inspect", src, "--json").stdout)
    assert document["quantized"] == [
        {
            "name": "experts.down_proj",
            "layout": "mxfp4",
            "logical_shape": [2, 4, 64],
            "block": [1, 1, 32],
            "rule": "names: *_blocks + *_scales (mxfp4)",
            "nbytes": 272,
            "parts": [
                {"name": "experts.down_proj_blocks", "role": "codes", "dtype": "U8",
                 "shape": [2, 4, 2, 16], "nbytes": 256},
                {"name": "experts.down_proj_scales", "role": "scale", "dtype": "U8",
                 "shape": [2, 4, 2], "nbytes": 16},
            ],
        }
    ]  # fmt: skip
    assert len(document["tensors"]) == 3  # every stored tensor, as before


def test_inspect_of_a_file_without_groups_has_no_quantized_section(tmp_path: Path) -> None:
    src = _write(tmp_path / "plain.safetensors", {"w": np.ones((2, 3), np.uint8)})
    done = run_cli("inspect", src)
    assert "quantized" not in done.stdout
    assert "quantized" not in json.loads(run_cli("inspect", src, "--json").stdout)


def test_inspect_filter_keeps_a_group_by_its_name(tmp_path: Path) -> None:
    src = write_fp8(tmp_path / "fp8")
    kept = json.loads(run_cli("inspect", src, "--json", "--filter", "scale_inv").stdout)
    assert [g["name"] for g in kept["quantized"]] == ["layer.weight"]
    dropped = json.loads(run_cli("inspect", src, "--json", "--filter", "norm").stdout)
    assert "quantized" not in dropped


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_inspect_lists_a_torch_quantized_tensor_as_a_group(tmp_path: Path) -> None:
    src = tmp_path / "q.pt"
    _quantized_pt(src)
    done = run_cli("inspect", src)
    assert done.returncode == 0, done.stderr
    assert "unreadable" not in done.stdout
    assert "    rule: torch quantized tensor (per_tensor_affine)" in done.stdout.splitlines()
    document = json.loads(run_cli("inspect", src, "--json").stdout)
    (group,) = document["quantized"]
    assert (group["layout"], group["logical_shape"]) == ("torch-affine", [4, 6])
    assert group["parts"] == [
        {"name": "q.weight", "role": "codes", "dtype": "I8", "shape": [4, 6], "nbytes": 24}
    ]


# -- diff ---------------------------------------------------------------------------------------


def _diff(a: Path, b: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    done = run_cli("diff", a, b, "--json", *flags)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_diff_of_identical_groups_reads_no_values(tmp_path: Path) -> None:
    src = write_fp8(tmp_path / "a")
    copy = write_fp8(tmp_path / "b")
    code, document = _diff(src, copy)
    assert code == 0
    assert document["quantized"] == [
        {"name": "layer.weight", "a": "fp8-block", "b": "fp8-block", "identical": True,
         "values": None}
    ]  # fmt: skip
    assert document["a"]["tensors"] == 2 and document["only_in_a"] == []
    text = run_cli("diff", src, copy).stdout
    assert "quantized: layer.weight: fp8-block vs fp8-block: identical parts" in text


def test_diff_of_two_scalings_compares_dequantized_values(tmp_path: Path) -> None:
    arrays = fp8_arrays()
    other = {**arrays, "layer.weight_scale_inv": arrays["layer.weight_scale_inv"] * 2}
    a, b = write_fp8(tmp_path / "a", arrays), write_fp8(tmp_path / "b", other)
    code, document = _diff(a, b)
    assert code == 1
    (found,) = document["quantized"]
    values_a, values_b = fp8_oracle(arrays), fp8_oracle(other)
    gap = np.abs(values_a.astype(np.float64) - values_b)
    assert found["identical"] is False
    assert found["values"]["numel"] == 256 * 256
    assert found["values"]["differing"] == int(np.count_nonzero(values_a != values_b))
    assert found["values"]["max_abs"] == pytest.approx(float(gap.max()), rel=1e-12)


def test_diff_a_quantized_checkpoint_against_its_float_original(tmp_path: Path) -> None:
    src = write_fp8(tmp_path / "fp8")
    exact, rounded = tmp_path / "f32.safetensors", tmp_path / "bf16.safetensors"
    assert run_cli("convert", src, exact, "--dequantize", "f32").returncode == 0
    assert run_cli("convert", src, rounded, "--dequantize", "bf16").returncode == 0
    code, document = _diff(src, exact)
    assert code == 0 and document["only_in_a"] == document["only_in_b"] == []
    (found,) = document["quantized"]
    assert (found["a"], found["b"], found["values"]["differing"]) == ("fp8-block", "F32", 0)
    code, document = _diff(src, rounded)
    (found,) = document["quantized"]
    f32, bf16 = oracle_of(src, "layer.weight"), read_weights(rounded)["layer.weight"]
    gap = np.abs(f32.astype(np.float64) - bf16.astype(np.float64))
    assert code == 1 and found["b"] == "BF16"
    assert found["values"]["max_abs"] == pytest.approx(float(gap.max()), rel=1e-12)
    code, _ = _diff(src, rounded, "--rtol", "0.01")  # bf16 rounds to 8 significant bits
    assert code == 0
    text = run_cli("diff", rounded, src).stdout
    assert "quantized: layer.weight: BF16 vs fp8-block: " in text


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_diff_a_torch_quantized_tensor_against_its_values(tmp_path: Path) -> None:
    src = tmp_path / "q.pt"
    codes = _quantized_pt(src)
    plain = tmp_path / "plain.safetensors"
    values = {"q.weight": codes.dequantize().numpy(), "bias": np.arange(3, dtype=np.float32)}
    _write(plain, values)
    code, document = _diff(src, plain)
    assert code == 0
    assert [(q["name"], q["a"], q["b"]) for q in document["quantized"]] == [
        ("q.weight", "torch-affine", "F32")
    ]
    _write(plain, {**values, "q.weight": values["q.weight"] + 1})
    code, document = _diff(src, plain)
    assert code == 1 and document["quantized"][0]["values"]["differing"] == 24


def test_convert_int4_to_gguf_repacks_q4_0_without_dequantize(tmp_path: Path) -> None:
    from tests.quantized.test_hf_int import hand_parts
    from weightstore.gguf import GgufReader

    parts, _ = hand_parts(rows=4, cols=64, gs=32, bits=4, asymmetric=False)
    parts["m.weight_scale"] = parts["m.weight_scale"].astype(np.float16)
    src = _write(tmp_path / "int4.safetensors", parts)
    dst = tmp_path / "int4.gguf"
    done = run_cli("convert", src, dst)
    assert done.returncode == 0, done.stderr
    with GgufReader.from_file(str(dst)) as reader:
        assert reader.descriptor("m.weight").ggml.name == "Q4_0"
        values = reader.get("m.weight")
    expected = SafetensorsStore.from_file(src).with_dequantize("f32").get_tensor("m.weight")
    assert expected is not None
    np.testing.assert_array_equal(values, expected.to_numpy())
