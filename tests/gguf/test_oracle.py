"""GGUF files against gguf-py (llama.cpp's reader and writer): what one writes, the other reads.

Files written by gguf-py's `GGUFWriter` (every metadata value type, every plain tensor type,
quantized tensors as random raw blocks, big-endian) are read by `GgufReader` and compared with
`GGUFReader`; files `GgufWriter` writes are read back by `GGUFReader` with the same pairs, infos
and bytes; a rewrite of a gguf-py file through weightstore is byte-identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore.entry import TensorEntry
from weightstore.gguf import GgufReader, GgufValue, GgufWriter, ValueType
from weightstore.quantized import GGML_TYPES

gguf = pytest.importorskip("gguf", reason="gguf-py (llama.cpp's gguf package) is the oracle")

PLAIN = {
    "F32": np.float32, "F16": np.float16, "F64": np.float64,
    "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
}  # fmt: skip
RNG = np.random.default_rng(25)


def _write_with_gguf_py(path: Path, endianess: Any = None, quantized: bool = True) -> None:
    """One file with every value type and every plain tensor type (and raw quantized blocks)."""
    rng = np.random.default_rng(25)  # the same tensors in every file
    kwargs = {} if endianess is None else {"endianess": endianess}
    writer = gguf.GGUFWriter(str(path), "llama", **kwargs)
    writer.add_uint8("v.u8", 200)
    writer.add_int8("v.i8", -100)
    writer.add_uint16("v.u16", 60_000)
    writer.add_int16("v.i16", -30_000)
    writer.add_uint32("v.u32", 4_000_000_000)
    writer.add_int32("v.i32", -2_000_000_000)
    writer.add_float32("v.f32", 0.1)
    writer.add_uint64("v.u64", 2**63 + 5)
    writer.add_int64("v.i64", -(2**62))
    writer.add_float64("v.f64", 0.1)
    writer.add_bool("v.bool", True)
    writer.add_string("v.str", "naïve ✓")
    writer.add_array("v.strings", ["a", "bb", "", "ccc"])
    writer.add_array("v.ints", [1, 2, 3])
    writer.add_array("v.floats", [0.5, 1.5])
    writer.add_array("v.nested", [[1, 2], [3, 4, 5]])
    for name, numpy_type in PLAIN.items():
        values = (rng.standard_normal((3, 64)) * 100).astype(numpy_type)
        writer.add_tensor(f"plain.{name}", values)
    bf16 = rng.integers(0, 2**16, (2, 32), dtype=np.uint16).view(np.uint8).reshape(2, 64)
    writer.add_tensor("plain.BF16", bf16, raw_dtype=gguf.GGMLQuantizationType.BF16)
    if quantized:
        for ggml in GGML_TYPES.values():
            if not ggml.quantized:
                continue
            rows, row_bytes = 2, 2 * ggml.type_size  # two blocks per row
            blocks = rng.integers(0, 256, (rows, row_bytes), dtype=np.uint8)
            writer.add_tensor(
                f"q.{ggml.name}", blocks, raw_dtype=gguf.GGMLQuantizationType(ggml.id)
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _oracle_fields(path: Path) -> dict[str, Any]:
    """gguf-py's view of every metadata pair: key -> Python value."""
    reader = gguf.GGUFReader(str(path))
    values = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # gguf-py's pseudo-fields for the header
        values[key] = field.contents()
    return values


@pytest.fixture(scope="module")
def oracle_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "all.gguf"
    _write_with_gguf_py(path)
    return path


def test_metadata_pairs_are_gguf_pys(oracle_file: Path) -> None:
    with GgufReader.from_file(oracle_file) as reader:
        ours = reader.metadata()
        assert reader.metadata_type("v.u32") == "uint32"
        assert reader.metadata_type("v.strings") == "array[string]"
        assert reader.metadata_length("v.strings") == 4
    expected = _oracle_fields(oracle_file)
    assert ours["v.nested"] == [[1, 2], [3, 4, 5]]  # gguf-py's contents() flattens it
    expected["v.nested"] = [[1, 2], [3, 4, 5]]
    assert ours.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, float):
            assert ours[key] == pytest.approx(value, rel=0, abs=0), key
        else:
            assert ours[key] == value, key


def test_tensor_infos_and_bytes_are_gguf_pys(oracle_file: Path) -> None:
    oracle = gguf.GGUFReader(str(oracle_file))
    with GgufReader.from_file(oracle_file) as reader:
        assert reader.names() == [t.name for t in oracle.tensors]
        for tensor in oracle.tensors:
            info = reader.descriptor(tensor.name)
            assert info.ggml.id == int(tensor.tensor_type), tensor.name
            assert info.dims == tuple(int(d) for d in tensor.shape), tensor.name
            assert info.shape == tuple(reversed(info.dims))
            raw = reader.get_raw(tensor.name)
            expected = np.asarray(tensor.data)
            assert raw.tobytes() == expected.tobytes(), tensor.name
            if not info.quantized and info.ggml.name != "BF16":
                np.testing.assert_array_equal(reader.get(tensor.name), expected)
                assert reader.get(tensor.name).shape == expected.shape


def test_plain_tensors_are_views_of_the_mapping(oracle_file: Path) -> None:
    with GgufReader.from_file(oracle_file) as reader:
        array = reader.get("plain.F32")
        assert not array.flags.owndata  # (a copy-on-write mapping: writes stay private)


def test_quantized_rows_slice_without_the_rest(oracle_file: Path) -> None:
    pytest.importorskip("weightstore.quantized._ggml_kernels", reason="kernels not merged")
    with GgufReader.from_file(oracle_file) as reader:
        whole = reader.get("q.Q8_0")
        for key in (np.s_[1], np.s_[0:1, 5:40:3], np.s_[..., -1], np.s_[:, ::-7]):
            got = reader.get_slice("q.Q8_0")[key]
            np.testing.assert_array_equal(got, whole[key])


def test_a_rewrite_is_byte_identical(oracle_file: Path, tmp_path: Path) -> None:
    with GgufReader.from_file(oracle_file) as reader:
        entries = []
        for name in reader.names():
            info = reader.descriptor(name)
            if info.quantized or info.ggml.name == "BF16":
                blocks = (info.ggml.name, lambda name=name: reader.get_raw(name))
                entry = TensorEntry(name, info.dtype, info.shape, b"", nbytes=0, blocks=blocks)
            else:
                entry = TensorEntry.from_array(name, reader.get(name))
            entries.append(entry)
        written = tmp_path / "again.gguf"
        GgufWriter(entries, reader.metadata_typed()).save(written)
    assert written.read_bytes() == oracle_file.read_bytes()


def test_gguf_py_reads_what_we_write(tmp_path: Path) -> None:
    arrays = {
        "w.f32": RNG.standard_normal((4, 8)).astype(np.float32),
        "w.f16": RNG.standard_normal((16,)).astype(np.float16),
        "w.i32": np.arange(6, dtype=np.int32).reshape(2, 3),
        "scalar": np.array(7.0, dtype=np.float64),
    }
    metadata: dict[str, object] = {
        "general.architecture": "llama",
        "count": 3,
        "big": 2**40,
        "ratio": 0.25,
        "flag": False,
        "names": ["x", "y"],
        "exact": GgufValue(ValueType.UINT16, 9),
    }
    path = tmp_path / "ours.gguf"
    GgufWriter([TensorEntry.from_array(k, v) for k, v in arrays.items()], metadata).save(path)
    oracle = gguf.GGUFReader(str(path))
    fields = _oracle_fields(path)
    assert fields == {
        "general.architecture": "llama", "count": 3, "big": 2**40, "ratio": 0.25,
        "flag": False, "names": ["x", "y"], "exact": 9,
    }  # fmt: skip
    types = {key: oracle.fields[key].types[0] for key in ("count", "big", "ratio", "exact")}
    assert types == {
        "count": gguf.GGUFValueType.INT32, "big": gguf.GGUFValueType.INT64,
        "ratio": gguf.GGUFValueType.FLOAT32, "exact": gguf.GGUFValueType.UINT16,
    }  # fmt: skip
    for tensor in oracle.tensors:
        expected = arrays[tensor.name]
        got = np.asarray(tensor.data)
        assert got.tobytes() == np.ascontiguousarray(expected).tobytes(), tensor.name
        assert int(tensor.n_elements) == expected.size


def test_big_endian_files_read_in_native_order(tmp_path: Path) -> None:
    path = tmp_path / "big.gguf"
    _write_with_gguf_py(path, endianess=gguf.GGUFEndian.BIG, quantized=False)
    little = tmp_path / "little.gguf"
    _write_with_gguf_py(little, quantized=False)
    with GgufReader.from_file(path) as reader, GgufReader.from_file(little) as expected:
        assert reader.byte_order == ">" and expected.byte_order == "<"
        assert reader.metadata() == expected.metadata()
        for name in expected.names():
            if name == "plain.BF16":
                continue
            got, want = reader.get(name), expected.get(name)
            assert got.dtype == want.dtype and got.dtype.isnative, name
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(reader.get_slice(name)[1:, ::3], want[1:, ::3])


def test_a_tokenizer_sized_array_opens_without_decoding(tmp_path: Path) -> None:
    tokens = [f"tok{i}" for i in range(262_144)]
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_tensor("w", np.zeros((2, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with GgufReader.from_file(path) as reader:
        lazy = reader._header.kvs["tokenizer.ggml.tokens"]
        assert not isinstance(lazy, GgufValue)  # recorded where it lies, not decoded
        assert reader.metadata_length("tokenizer.ggml.tokens") == len(tokens)
        assert reader.metadata()["tokenizer.ggml.tokens"] == tokens


def test_every_quantized_type_reads_as_gguf_py_dequantizes_it(oracle_file: Path) -> None:
    from weightstore.errors import DTypeError
    from weightstore.quantized import dequantizable

    oracle = {t.name: t for t in gguf.GGUFReader(str(oracle_file)).tensors}
    with GgufReader.from_file(oracle_file) as reader:
        for name in reader.names():
            info = reader.descriptor(name)
            if not info.quantized:
                continue
            if not dequantizable(info.ggml):
                with pytest.raises(DTypeError, match=info.ggml.name):
                    reader.get(name)
                continue
            tensor = oracle[name]
            try:
                with np.errstate(all="ignore"):  # random scales: inf and NaN among them
                    expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            except NotImplementedError:  # Q8_K: gguf-py has no dequantizer (tests/quantized)
                continue
            got = reader.get(name)
            assert got.shape == expected.shape == info.shape, name
            same = (got.view(np.uint32) == expected.view(np.uint32)) | (
                np.isnan(got) & np.isnan(expected)
            )
            assert same.all(), name
