"""The command line on GGUF files: `inspect` lists the header, the typed metadata (arrays by
their first items) and each tensor's ggml type; `verify` reads quantized blocks raw; `diff`
compares values and says when blocks are identical; `convert` reads and writes GGUF through
the stores, ``--quantize`` included.

Files are written with gguf-py (the oracle llama.cpp ships). Tests that need dequantized values
skip until the kernels (`weightstore.quantized._ggml_kernels`) are in the tree; those that need
a GGUF store, or its ``with_quantize`` builder, skip until `weightstore.stores` has them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli._support import assert_error, read_weights, run_cli, write_weights
from weightstore.cli import main
from weightstore.cli._report import summarize
from weightstore.errors import MetadataError
from weightstore.gguf import GgufReader, GgufWriter, ValueType
from weightstore.gguf._header import ArrayHead
from weightstore.io._digest import METADATA_KEY, digest_of, encode_digests
from weightstore.stores import Store

gguf = pytest.importorskip("gguf")

VOCABULARY = 1_000  # strings in the test vocabulary
ROWS, COLUMNS = 4, 64  # the quantized tensor: two Q8_0 blocks per row


def _kernels() -> None:
    pytest.importorskip("weightstore.quantized._ggml_kernels")


def _gguf_store() -> type[Store]:
    """The store that reads and writes GGUF, or skip: the lead adds it to the stores."""
    found = [store for store in Store.__subclasses__() if store.FORMAT.name == "gguf"]
    if not found:
        pytest.skip("no GGUF store in weightstore.stores yet")
    return found[0]


def _with_quantize() -> None:
    if not hasattr(_gguf_store(), "with_quantize"):
        pytest.skip("Store has no with_quantize yet")


def plain_arrays(seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return {
        "token_embd.weight": rng.standard_normal((8, 64)).astype(np.float32),
        "blk.0.attn_q.weight": rng.standard_normal((64, 64)).astype(np.float16),
        "blk.0.attn_norm.weight": rng.standard_normal(64).astype(np.float32),
        "blk.0.ids": np.arange(6, dtype=np.int32),
    }


def quantized_values(seed: int = 1) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal((ROWS, COLUMNS)).astype(np.float32)


def write_gguf(
    path: Path,
    arrays: dict[str, np.ndarray[Any, Any]],
    *,
    quantized: dict[str, tuple[np.ndarray[Any, Any], str]] | None = None,
    strings: dict[str, str] | None = None,
    big_endian: bool = False,
) -> Path:
    """A GGUF file holding `arrays` in their own types, `quantized` ((values, ggml type name))
    as gguf-py quantizes them, a vocabulary of `VOCABULARY` tokens and a few scalars."""
    endian = gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE
    writer = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    writer.add_uint32("llama.context_length", 2048)
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(VOCABULARY)])
    writer.add_array("tokenizer.ggml.scores", [float(i) for i in range(VOCABULARY)])
    for key, value in (strings or {}).items():
        writer.add_string(key, value)
    for name, array in arrays.items():
        writer.add_tensor(name, array)  # gguf-py swaps for a big-endian file
    for name, (values, kind) in (quantized or {}).items():
        qtype = gguf.GGMLQuantizationType[kind]
        writer.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def model_gguf(tmp_path: Path, name: str = "model.gguf", kind: str = "Q8_0") -> Path:
    return write_gguf(
        tmp_path / name,
        plain_arrays(),
        quantized={"blk.0.ffn_up.weight": (quantized_values(), kind)},
    )


def disk_bytes() -> int:
    """Bytes of `model_gguf`'s tensors in the file: plain ones whole, Q8_0 as its blocks."""
    return sum(a.nbytes for a in plain_arrays().values()) + ROWS * COLUMNS // 32 * 34


# -- inspect -------------------------------------------------------------------------------------


def test_inspect_lists_the_header_metadata_and_ggml_types(tmp_path: Path) -> None:
    path = model_gguf(tmp_path)
    done = run_cli("inspect", path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "format:   gguf (version 3)" in lines
    layout = next(line for line in lines if line.startswith("layout:"))
    assert layout.startswith("layout:   byte_order little, alignment 32, data_start ")
    assert "  llama.context_length = 2048" in lines
    assert "  llama.rope.freq_base = 10000.0" in lines
    assert (
        '  tokenizer.ggml.tokens = array[string], 1,000 items: "tok0", "tok1", "tok2", "tok3", '
        '"tok4", ...'
    ) in lines
    assert (
        "  tokenizer.ggml.scores = array[float32], 1,000 items: 0.0, 1.0, 2.0, 3.0, 4.0, ..."
        in lines
    )
    header = next(line for line in lines if line.startswith("name "))
    assert header.split() == ["name", "type", "shape", "bytes", "offset"]
    row = next(line for line in lines if line.startswith("blk.0.ffn_up.weight"))
    assert row.split()[1:5] == ["Q8_0", "[4,", "64]", "272"]
    assert next(line for line in lines if line.startswith("blk.0.ids")).split()[1] == "I32"
    elements = sum(a.size for a in plain_arrays().values()) + ROWS * COLUMNS
    assert f"total: 5 tensors, {elements:,} elements, {disk_bytes():,} bytes" in lines
    assert lines[-1] == (
        "by type: F16: 1 tensor, 8,192 bytes; F32: 2 tensors, 2,304 bytes; "
        "Q8_0: 1 tensor, 272 bytes; I32: 1 tensor, 24 bytes"
    )


def test_inspect_json_gives_types_layout_and_array_heads(tmp_path: Path) -> None:
    path = model_gguf(tmp_path)
    done = run_cli("inspect", path, "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["format"] == "gguf" and document["version"] == "3"
    with GgufReader.from_file(path) as reader:
        data_start = reader.data_start
        offset = data_start + reader.descriptor("blk.0.ffn_up.weight").data_offsets[0]
    assert document["layout"] == {"byte_order": "little", "alignment": 32, "data_start": data_start}
    metadata = document["metadata"]
    assert metadata["general.architecture"] == "llama"
    assert metadata["llama.context_length"] == 2048
    assert metadata["tokenizer.ggml.tokens"] == {
        "type": "array[string]",
        "count": VOCABULARY,
        "first": ["tok0", "tok1", "tok2", "tok3", "tok4"],
    }
    rows = {row["name"]: row for row in document["tensors"]}
    assert rows["blk.0.ffn_up.weight"] == {
        "name": "blk.0.ffn_up.weight",
        "dtype": "F32",  # what it reads as: its dequantized values
        "shape": [ROWS, COLUMNS],
        "nbytes": 272,
        "offset": offset,
        "ggml_type": "Q8_0",
    }
    assert rows["blk.0.attn_q.weight"]["ggml_type"] == "F16"
    assert list(rows) == [*plain_arrays(), "blk.0.ffn_up.weight"]  # the infos' order
    assert document["total_nbytes"] == disk_bytes()
    assert document["ggml_types"]["Q8_0"] == {"tensors": 1, "nbytes": 272}


def test_other_formats_json_has_no_gguf_keys(tmp_path: Path) -> None:
    path = write_weights("safetensors", tmp_path / "m.safetensors", plain_arrays())
    document = json.loads(run_cli("inspect", path, "--json").stdout)
    assert "layout" not in document and "ggml_types" not in document
    assert all("ggml_type" not in row for row in document["tensors"])


def test_inspect_decodes_only_the_head_of_a_vocabulary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 100k-token vocabulary is listed by its first strings, never decoded whole."""
    import weightstore.gguf._header as header

    writer = gguf.GGUFWriter(str(tmp_path / "vocab.gguf"), "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(100_000)])
    writer.add_tensor("w", np.zeros(4, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    decoded: list[bytes] = []
    real = header.decode_text
    monkeypatch.setattr(header, "decode_text", lambda raw: decoded.append(raw) or real(raw))
    report = summarize(tmp_path / "vocab.gguf")
    assert report.metadata["tokenizer.ggml.tokens"]["count"] == 100_000
    assert len(decoded) < 20, len(decoded)  # the architecture, the five shown tokens


def test_a_big_endian_file_says_so_and_verifies(tmp_path: Path) -> None:
    """Its quantized blocks are read, and with --values left unjudged: the reader does not
    dequantize a big-endian file's blocks."""
    quantized = {"blk.0.ffn_up.weight": (quantized_values(), "Q8_0")}
    path = write_gguf(tmp_path / "big.gguf", plain_arrays(), quantized=quantized, big_endian=True)
    listing = run_cli("inspect", path)
    assert "layout:   byte_order big, alignment 32" in listing.stdout
    for flags in ((), ("--values",)):
        done = run_cli("verify", *flags, path)
        assert done.returncode == 0, done.stdout
        assert done.stdout.startswith(f"{path}: ok (gguf, 5 tensors, {disk_bytes():,} bytes read)")
    assert done.stdout.splitlines()[1] == (
        "  note: values of 4 tensors scanned: 0 with NaN or Inf, 0 all-zero, 0 constant; "
        "1 tensor not judged (bool, no NumPy type, or blocks no kernel reads)"
    )


def test_a_legacy_ggml_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"lmgg" + bytes(64))
    cause = f"{path}: is a legacy GGML file (llama.cpp before GGUF, 2023), not GGUF"
    for command in (("inspect", path), ("diff", path, path)):
        assert_error(run_cli(*command), 2, cause, "convert_llama_ggml_to_gguf.py")
    done = run_cli("verify", path)
    assert_error(done, 2, f"{path}: verification failed (1 problem)")
    assert done.stdout.splitlines()[1].startswith("  is a legacy GGML file (llama.cpp")


# -- metadata heads (the reader's bounded decode) ------------------------------------------------


def test_metadata_head_of_nested_arrays_and_a_scalar() -> None:
    nested = [[1, 2, 3], [4, 5], [6], [], [7, 8, 9, 10]]
    data = GgufWriter([], {"nested": nested, "n": 3, "s": ["a", "b", "c"]}).to_bytes()
    with GgufReader.from_bytes(data) as reader:
        head = reader.metadata_head("nested", 2)
        assert head == ArrayHead(
            ValueType.ARRAY,
            5,
            [ArrayHead(ValueType.INT32, 3, [1, 2]), ArrayHead(ValueType.INT32, 2, [4, 5])],
        )
        assert head.type_name == "array[array]"
        assert reader.metadata_head("nested", 10).items[4] == ArrayHead(
            ValueType.INT32, 4, [7, 8, 9, 10]
        )
        assert reader.metadata_head("s", 2) == ArrayHead(ValueType.STRING, 3, ["a", "b"])
        with pytest.raises(MetadataError, match="'n' is a int32, not an array"):
            reader.metadata_head("n", 2)


# -- verify --------------------------------------------------------------------------------------


def test_verify_reads_quantized_blocks_raw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every byte on disk is read, the blocks as blocks: nothing is dequantized."""
    path = model_gguf(tmp_path)

    def refuse(*args: object) -> None:
        raise AssertionError("verify dequantized a tensor")

    monkeypatch.setattr(GgufReader, "_dequantized", refuse)
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"{path}: ok (gguf, 5 tensors, {disk_bytes():,} bytes read)"


def _with_digests(tmp_path: Path) -> Path:
    """`model_gguf` carrying the SHA-256 of every tensor's bytes in the file."""
    plain = plain_arrays()
    blocks = gguf.quants.quantize(quantized_values(), gguf.GGMLQuantizationType.Q8_0)
    digests = {name: digest_of("sha256", array.tobytes()) for name, array in plain.items()}
    digests["blk.0.ffn_up.weight"] = digest_of("sha256", blocks.tobytes())
    return write_gguf(
        tmp_path / "digests.gguf",
        plain,
        quantized={"blk.0.ffn_up.weight": (quantized_values(), "Q8_0")},
        strings={METADATA_KEY: encode_digests("sha256", digests)},
    )


def test_verify_checks_the_digests_of_quantized_blocks(tmp_path: Path) -> None:
    path = _with_digests(tmp_path)
    done = run_cli("verify", path)
    assert done.returncode == 0, done.stdout
    assert "  note: digests checked: 5 tensors" in done.stdout.splitlines()
    with GgufReader.from_file(path) as reader:
        start = reader.data_start + reader.descriptor("blk.0.ffn_up.weight").data_offsets[0]
    data = bytearray(path.read_bytes())
    data[start + 5] ^= 0x01  # one quant of the first block
    path.write_bytes(bytes(data))
    done = run_cli("verify", path)
    assert_error(done, 2, f"{path}: verification failed (1 problem)")
    problem = done.stdout.splitlines()[1]
    assert problem.startswith("  tensor 'blk.0.ffn_up.weight': ") and "digest" in problem


def test_verify_values_dequantizes_and_finds_nan(tmp_path: Path) -> None:
    _kernels()
    path = model_gguf(tmp_path)
    done = run_cli("verify", "--values", path)
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith(f"{path}: ok (gguf, 5 tensors, {disk_bytes():,} bytes read)")
    assert "values of 5 tensors scanned: 0 with NaN or Inf" in done.stdout
    with GgufReader.from_file(path) as reader:
        start = reader.data_start + reader.descriptor("blk.0.ffn_up.weight").data_offsets[0]
    data = bytearray(path.read_bytes())
    data[start : start + 2] = np.float16(np.nan).tobytes()  # the first block's scale
    path.write_bytes(bytes(data))
    done = run_cli("verify", "--values", path)
    assert_error(done, 2, "verification failed")
    assert "  tensor 'blk.0.ffn_up.weight': 32 NaN among 256 values" in done.stdout.splitlines()


# -- diff ----------------------------------------------------------------------------------------


def test_diff_of_identical_blocks_needs_no_dequantizing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = model_gguf(tmp_path, "a.gguf"), model_gguf(tmp_path, "b.gguf")

    def refuse(*args: object) -> None:
        raise AssertionError("diff dequantized identical blocks")

    monkeypatch.setattr(GgufReader, "_dequantized", refuse)
    assert main(["diff", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:] == [
        "identical blocks: 1 tensor (Q8_0), equal without dequantizing",
        "result: equal (5 tensors)",
    ]
    assert main(["diff", str(a), str(b), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["identical_blocks"] == [{"name": "blk.0.ffn_up.weight", "type": "Q8_0"}]
    assert document["equal"] is True and document["equal_tensors"] == 5


def test_diff_of_plain_gguf_against_safetensors_compares_values(tmp_path: Path) -> None:
    a = model_gguf(tmp_path)
    arrays = plain_arrays()
    same = write_weights("safetensors", tmp_path / "same.safetensors", arrays)
    done = run_cli("diff", a, same)
    assert done.returncode == 1  # the quantized tensor is only in a
    assert done.stdout.splitlines()[2:] == [
        "only in a: blk.0.ffn_up.weight",
        "result: different (4 of 5 tensors equal)",
    ]
    arrays["blk.0.ids"] = arrays["blk.0.ids"] + np.array([0, 0, 0, 0, 0, 2], np.int32)
    changed = write_weights("safetensors", tmp_path / "changed.safetensors", arrays)
    plain = write_gguf(tmp_path / "plain.gguf", plain_arrays())
    done = run_cli("diff", plain, changed)
    assert done.returncode == 1
    assert "values differ: blk.0.ids: 1 of 6 elements, max abs diff 2" in done.stdout


def test_diff_of_quantized_tensors_compares_dequantized_values(tmp_path: Path) -> None:
    _kernels()
    q8, q4 = model_gguf(tmp_path, "q8.gguf"), model_gguf(tmp_path, "q4.gguf", kind="Q4_0")
    done = run_cli("diff", q8, q4)
    assert done.returncode == 1
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("dtype differs")]
    assert line.startswith("dtype differs: blk.0.ffn_up.weight: Q8_0 vs Q4_0 (")
    assert "values differ" in line
    with GgufReader.from_file(q8) as reader:
        values = {name: np.array(reader.get(name)) for name in reader.names()}
    dequantized = write_weights("safetensors", tmp_path / "q8.safetensors", values)
    done = run_cli("diff", q8, dequantized, "--json")
    document = json.loads(done.stdout)
    assert document["dtype_changed"] == [
        {
            "name": "blk.0.ffn_up.weight",
            "a": "Q8_0",
            "b": "F32",
            "values": {"numel": 256, "differing": 0, "max_abs": 0.0, "max_rel": 0.0},
        }
    ]
    assert document["identical_blocks"] == [] and document["equal_tensors"] == 4


# -- convert -------------------------------------------------------------------------------------


def test_quantize_is_parsed_in_either_case(tmp_path: Path) -> None:
    from weightstore.cli import build_parser

    src, dst = str(tmp_path / "a.safetensors"), str(tmp_path / "b.gguf")
    args = build_parser().parse_args(["convert", src, dst, "--quantize", "Q8_0"])
    assert args.quantize == "q8_0"
    done = run_cli("convert", src, dst, "--quantize", "q5_k")
    assert_error(done, 2, "--quantize", "invalid choice: 'q5_k'")


def test_convert_plain_gguf_to_safetensors_and_back(tmp_path: Path) -> None:
    _gguf_store()
    source = write_gguf(tmp_path / "plain.gguf", plain_arrays())
    out = tmp_path / "plain.safetensors"
    done = run_cli("convert", source, out)
    assert done.returncode == 0, done.stderr
    converted = read_weights(out)
    for name, array in plain_arrays().items():
        np.testing.assert_array_equal(converted[name], array)
    back = tmp_path / "back.gguf"
    done = run_cli("convert", out, back)
    assert done.returncode == 0, done.stderr
    assert run_cli("diff", source, back).returncode == 0


def test_convert_quantized_gguf_to_safetensors_dequantizes(tmp_path: Path) -> None:
    _gguf_store()
    _kernels()
    source = model_gguf(tmp_path)
    with GgufReader.from_file(source) as reader:
        expected = np.array(reader.get("blk.0.ffn_up.weight"))
    out = tmp_path / "f32.safetensors"
    assert run_cli("convert", source, out).returncode == 0
    np.testing.assert_array_equal(read_weights(out)["blk.0.ffn_up.weight"], expected)
    half = tmp_path / "f16.safetensors"
    assert run_cli("convert", source, half, "--dtype", "f16").returncode == 0
    document = json.loads(run_cli("inspect", half, "--json").stdout)
    assert {row["dtype"] for row in document["tensors"] if row["name"] != "blk.0.ids"} == {"F16"}


def test_convert_gguf_to_gguf_keeps_the_blocks(tmp_path: Path) -> None:
    _gguf_store()
    source = model_gguf(tmp_path)
    copy = tmp_path / "copy.gguf"
    done = run_cli("convert", source, copy)
    assert done.returncode == 0, done.stderr
    done = run_cli("diff", source, copy)
    assert done.returncode == 0, done.stdout
    assert "identical blocks: 1 tensor (Q8_0), equal without dequantizing" in done.stdout


def test_convert_quantize_writes_q8_0_and_q4_0(tmp_path: Path) -> None:
    _with_quantize()
    _kernels()
    rng = np.random.default_rng(3)
    arrays = {
        "blk.0.ffn_up.weight": rng.standard_normal((8, 64)).astype(np.float32),
        "blk.0.ffn_up.bias": rng.standard_normal(8).astype(np.float32),
        "odd.weight": rng.standard_normal((3, 5)).astype(np.float32),  # rows of no whole block
    }
    source = write_weights("safetensors", tmp_path / "model.safetensors", arrays)
    for flag, kind in (("q8_0", "Q8_0"), ("Q4_0", "Q4_0")):
        out = tmp_path / f"{flag}.gguf"
        done = run_cli("convert", source, out, "--quantize", flag)
        assert done.returncode == 0, done.stderr
        rows = {
            row["name"]: row
            for row in json.loads(run_cli("inspect", out, "--json").stdout)["tensors"]
        }
        assert rows["blk.0.ffn_up.weight"]["ggml_type"] == kind
        assert rows["blk.0.ffn_up.bias"]["ggml_type"] == "F32"
        assert rows["odd.weight"]["ggml_type"] == "F32"
        assert run_cli("verify", "--values", out).returncode == 0


def test_convert_quantize_to_a_format_without_blocks_is_refused(tmp_path: Path) -> None:
    _with_quantize()
    source = write_weights("safetensors", tmp_path / "model.safetensors", plain_arrays())
    out = tmp_path / "out.safetensors"
    done = run_cli("convert", source, out, "--quantize", "q8_0")
    assert_error(done, 2, "--quantize")
    assert not out.exists()


def test_convert_pytorch_to_gguf(tmp_path: Path) -> None:
    _gguf_store()
    arrays = {name: a for name, a in plain_arrays().items() if a.dtype != np.float16}
    source = write_weights("pytorch", tmp_path / "model.pt", arrays)
    out = tmp_path / "model.gguf"
    done = run_cli("convert", source, out)
    assert done.returncode == 0, done.stderr
    assert run_cli("diff", source, out).returncode == 0
