"""Regenerate the seed corpora: ``python -m fuzz.seeds`` (needs torch for the PyTorch seeds).

Small real files of each format, written by our own writers and by `torch.save`, one feature
each (dtypes, empty and scalar tensors, metadata, scalars, strided and shared storages, whole
modules, every PyTorch layout, compressed zip members), so the fuzzer starts from every branch a
valid file takes. Files go to fuzz/corpus/<parser>/seed-<name>; the whole set stays a few
hundred KB. The index parsers' seeds are indexes of the directories `fuzz.index_targets` builds.
Corpus files the fuzzer adds (named by their SHA-1) are left alone.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from weightstore import burnpack, safetensors
from weightstore.entry import TensorEntry

CORPUS = Path(__file__).resolve().parent / "corpus"


def _arrays() -> dict[str, dict[str, np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(0)
    return {
        "f32": {"fc.weight": rng.standard_normal((4, 3), np.float32), "fc.bias": np.ones(4, "f4")},
        "dtypes": {
            name: np.arange(6).astype(name).reshape(2, 3)
            for name in ("f2", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "?")
        },
        "edge": {
            "empty": np.zeros((0, 3), "f4"),
            "scalar": np.array(2.5, "f4"),
            "one": np.ones((1, 1, 1, 1), "f4"),
            "a.b.c.d": np.arange(3, dtype="i4"),
        },
    }


def _qfloat_entries() -> list[TensorEntry]:
    """Burn QFloat tensors: Q4S packed in u32 words with f16 block scales, Q2S per tensor,
    and Q8S native with UE4M3 block scales under an f32 per-tensor scale."""
    from weightstore.dtypes import from_name

    def scheme(value: str, store: Any, tensor: Any, block: Any) -> dict[str, Any]:
        return {"value": value, "store": store, "mode": "Symmetric", "tensor": tensor,
                "block": block}  # fmt: skip

    def block(size: int, dtype: str) -> dict[str, Any]:
        return {"size": {"storage": [size, 1, 1, 1, 1], "len": 1}, "dtype": dtype}

    words = np.arange(6, dtype="<u4") * 0x1234567
    tensors = [
        ("q4", (3, 9), words.tobytes() + np.ones(9, "<f2").tobytes(),
         scheme("Q4S", {"PackedU32": 0}, None, block(4, "F16"))),
        ("q2", (2, 5), words[:2].tobytes() + np.float32(0.5).tobytes(),
         scheme("Q2S", {"PackedU32": 0}, None, None)),
        ("q8", (8,), bytes(range(8)) + bytes([0x30, 0x38]) + np.float32(2).tobytes(),
         scheme("Q8S", "Native", "F32", block(4, "UE4M3"))),
    ]  # fmt: skip
    return [
        TensorEntry(name, from_name("QFLOAT"), shape, data, nbytes=len(data), quant_scheme=quant)
        for name, shape, data, quant in tensors
    ]


def _burnpack_seeds() -> dict[str, bytes]:
    seeds: dict[str, bytes] = {}
    for label, arrays in _arrays().items():
        entries = [TensorEntry.from_array(name, value) for name, value in arrays.items()]
        seeds[label] = burnpack.write_bytes(entries)
    entries = [TensorEntry.from_array("w", np.ones((2, 2), "f4"))]
    seeds["metadata"] = burnpack.write_bytes(entries, {"format": "burn", "": "x" * 40})
    seeds["scalars"] = burnpack.write_bytes(entries, scalars={"epoch": 3, "lr": 0.5, "ok": True})
    seeds["none"] = burnpack.write_bytes([])
    seeds["qfloat"] = burnpack.write_bytes(_qfloat_entries())
    example = Path(burnpack.__file__).parent.parent / "examples" / "tiny_cnn.bpk"
    seeds["tiny_cnn"] = example.read_bytes()
    return seeds


def _safetensors_seeds() -> dict[str, bytes]:
    seeds: dict[str, bytes] = {}
    for label, arrays in _arrays().items():
        entries = [TensorEntry.from_array(name, value) for name, value in arrays.items()]
        seeds[label] = safetensors.write_bytes(entries)
    entries = [TensorEntry.from_array("w", np.ones((2, 2), "f4"))]
    seeds["metadata"] = safetensors.write_bytes(entries, {"format": "pt", "k": "v" * 30})
    seeds["none"] = safetensors.write_bytes([])
    for label, (arrays, config) in _quantized_groups().items():
        entries = [TensorEntry.from_array(name, value) for name, value in arrays.items()]
        metadata = None if config is None else {"quantization_config": json.dumps(config)}
        seeds[f"quantized-{label}"] = safetensors.write_bytes(entries, metadata, keep_order=True)
    return seeds


_Arrays = dict[str, np.ndarray[Any, Any]]


def _quantized_groups() -> dict[str, tuple[_Arrays, dict[str, Any] | None]]:
    """One small checkpoint per quantized layout (`weightstore.quantized.recognise`), each with
    the ``quantization_config`` its producer writes (kept in the metadata, where the fuzz target
    reads it; None: recognised by names alone), every part consistent, so that the mutations
    (`fuzz.quantized_mutators`) start from groups that dequantize."""
    import ml_dtypes

    rng = np.random.default_rng(1)
    e4m3 = ml_dtypes.float8_e4m3fn

    def codes(shape: tuple[int, ...], dtype: Any = e4m3) -> np.ndarray[Any, Any]:
        return rng.uniform(-4, 4, shape).astype(dtype)

    def words(shape: tuple[int, ...], dtype: Any = np.uint8) -> np.ndarray[Any, Any]:
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)

    ct = "compressed-tensors"
    int4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}
    return {
        "fp8-block": (  # DeepSeek's layout in 2x64 blocks, partial edge blocks included
            {"a.weight": codes((5, 130)), "a.weight_scale_inv": rng.uniform(0.1, 2, (3, 3))
             .astype(np.float32), "a.bias": np.ones(5, "f4")},
            {"quant_method": "fp8", "weight_block_size": [2, 64]},
        ),
        "fp8-names": (  # no config: a per-row E5M2 group and a 128x128 one, by names
            {"r.weight": codes((3, 8), ml_dtypes.float8_e5m2),
             "r.weight_scale": np.full((3, 1), 0.5, np.float32),
             "b.weight": codes((4, 6)), "b.weight_scale_inv": np.ones((1, 1), ml_dtypes.bfloat16)},
            None,
        ),
        "mxfp4": (  # gpt-oss experts: U8 [experts, rows, G, 16] and E8M0 U8 [experts, rows, G]
            {"e.gate_up_proj_blocks": words((2, 3, 2, 16)),
             "e.gate_up_proj_scales": rng.integers(118, 130, (2, 3, 2), dtype=np.uint8)},
            {"quant_method": "mxfp4"},
        ),
        "nvfp4": (  # compressed-tensors nvfp4-pack-quantized, W4A4
            {"n.weight_packed": words((4, 16)), "n.weight_scale": rng.uniform(0.1, 40, (4, 2))
             .astype(e4m3), "n.weight_global_scale": np.array([37.5], np.float32),
             "n.input_global_scale": np.array([3.0], np.float32)},
            {"quant_method": ct, "format": "nvfp4-pack-quantized",
             "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float"}}}},
        ),
        "nvfp4-modelopt": (  # ModelOpt's names: weight U8, weight_scale, weight_scale_2
            {"o.weight": words((2, 16)), "o.weight_scale": np.ones((2, 2), e4m3),
             "o.weight_scale_2": np.array([0.25], np.float32)},
            {"quant_method": "modelopt", "quant_algo": "NVFP4"},
        ),
        "int-pack": (  # int4 in groups of 32, asymmetric, with activation order (g_idx)
            {"q.weight_packed": words((4, 8), np.int32),
             "q.weight_scale": rng.uniform(0.01, 1, (4, 2)).astype(np.float16),
             "q.weight_zero_point": words((1, 2), np.int32),
             "q.weight_shape": np.array([4, 64], np.int64),
             "q.weight_g_idx": rng.permutation(np.arange(64) // 32).astype(np.int32)},
            {"quant_method": ct, "format": "pack-quantized",
             "config_groups": {"group_0": {"weights": int4}}},
        ),
        "int-pack-names": (  # no config: 3-bit codes per channel, bits from an I32 weight_shape
            {"p.weight_packed": words((2, 3), np.int32),
             "p.weight_scale": np.full((2, 1), 0.5, np.float32),
             "p.weight_shape": np.array([2, 32], np.int32)},
            None,
        ),
    }  # fmt: skip


def _torch_bytes(obj: Any, **options: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer, **options)
    return buffer.getvalue()


def _torchscript(module: Any) -> bytes:
    """A scripted module's archive: its code/ members are what the class-header parser reads."""
    import torch

    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


def _rezip(data: bytes, compression: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            entry.compress_type = compression
            new.writestr(entry, old.read(info))
    return out.getvalue()


def _tar(storage: np.ndarray[Any, Any]) -> bytes:
    """A tar checkpoint as torch < 0.1.10 wrote one (one storage, one 2x3 tensor)."""
    from tests.pytorch_reader._support import op_dict, op_str, torch_style_tar

    root = op_dict([(op_str("x"), op_str("2") + b"Q")])
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    path = folder / f"weightstore-seed-{os.getpid()}.tar"
    try:
        tensor = (2, 1, "torch.FloatTensor", (2, 3), (3, 1), 0)
        torch_style_tar(path, [(1, "FloatStorage", storage)], [tensor], root)
        return path.read_bytes()
    finally:
        path.unlink(missing_ok=True)


def _quantized(torch: Any) -> dict[str, Any]:
    """One quantized tensor of each scheme torch saves, a strided one among them."""
    import warnings

    values = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    scales = torch.tensor([0.5, 0.25, 2.0], dtype=torch.float64)
    with warnings.catch_warnings():  # torch deprecates its qint dtypes
        warnings.simplefilter("ignore")
        return {
            "per_tensor": torch.quantize_per_tensor(values, 0.5, 1, torch.qint8).t(),
            "per_channel": torch.quantize_per_channel(
                values, scales, torch.tensor([0, 1, 2]), 1, torch.quint8
            ),
        }


def _pytorch_seeds() -> dict[str, bytes]:
    import torch
    from torch import nn

    DTYPES = (torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int64,
              torch.uint8, torch.bool, torch.complex64)  # fmt: skip
    torch.manual_seed(0)
    linear = nn.Linear(3, 2)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    seeds = {
        "state_dict": _torch_bytes(linear.state_dict()),
        "checkpoint": _torch_bytes(
            {"model": linear.state_dict(), "epoch": 3, "config": {"lr": 0.1, "names": ["a"]}}
        ),
        "dtypes": _torch_bytes({str(d).split(".")[-1]: torch.ones(2, 2).to(d) for d in DTYPES}),
        "views": _torch_bytes({"t": base.t(), "row": base[1], "same": base, "step": base[:, ::2]}),
        "module": _torch_bytes(nn.Sequential(nn.Linear(2, 2), nn.ReLU())),
        "scalar": _torch_bytes({"s": torch.tensor(1.5), "e": torch.zeros(0, 2)}),
        "legacy": _torch_bytes(linear.state_dict(), _use_new_zipfile_serialization=False),
        "tar": _tar(np.arange(6, dtype="<f4")),
        "pickle": pickle.dumps({"plain": [1, 2.5, "x", None, (True,)]}, protocol=2),
        "quantized": _torch_bytes(_quantized(torch)),
    }
    seeds["torchscript"] = _torchscript(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    state = seeds["state_dict"]
    seeds["deflate"] = _rezip(state, zipfile.ZIP_DEFLATED)
    seeds["bzip2"] = _rezip(state, zipfile.ZIP_BZIP2)
    seeds["lzma"] = _rezip(state, zipfile.ZIP_LZMA)
    return seeds


def _gguf_blocks(ggml_name: str, shape: tuple[int, ...], rng: np.random.Generator) -> TensorEntry:
    """A tensor of quantized blocks: random bytes, each block's leading f16 scale set to a
    small finite value so the kernels' arithmetic is ordinary (the mutator breaks it)."""
    from weightstore.dtypes import from_name
    from weightstore.quantized import GGML_TYPES_BY_NAME

    ggml = GGML_TYPES_BY_NAME[ggml_name]
    count = int(np.prod(shape)) // ggml.block_size
    blocks = rng.integers(0, 256, (count, ggml.type_size), np.uint8)
    if ggml.type_size >= 2:
        blocks[:, :2] = np.frombuffer(np.float16(0.25).tobytes(), np.uint8)
    raw = blocks.tobytes()
    name = f"blk.0.{ggml_name.lower()}.weight"
    return TensorEntry(
        name, from_name("F32"), shape, lambda: bytes(4 * count * ggml.block_size),
        blocks=(ggml_name, lambda: raw),
    )  # fmt: skip


def _gguf_seeds() -> dict[str, bytes]:
    """Written by `GgufWriter` (plain and quantized types, typed and inferred metadata, nested
    arrays, an alignment of 64 and of 1) and by hand: big-endian, a tokenizer's arrays, a
    0-d and an empty tensor, a 4-dim one."""
    from fuzz.gguf_mutators import encode, flip_byte_order, parse
    from weightstore.dtypes import from_name
    from weightstore.gguf import GgufValue, GgufWriter, ValueType

    rng = np.random.default_rng(0)
    plain = [
        TensorEntry.from_array(f"t.{name}", np.arange(6).astype(name).reshape(2, 3))
        for name in ("f4", "f2", "f8", "i1", "i2", "i4", "i8")
    ]
    ones = np.full(8, 0x3F80, "<u2").tobytes()  # 1.0 in bfloat16
    plain.append(TensorEntry("t.bf16", from_name("BF16"), (2, 4), ones))
    metadata: dict[str, object] = {
        "general.architecture": "llama", "general.name": "tiny", "llama.block_count": 2,
        "llama.rope.freq_base": 10000.0, "general.ok": True, "general.tags": ["a", "b"],
        "llama.sizes": [1, 2, 3],
    }  # fmt: skip
    seeds = {"plain": GgufWriter(plain, metadata).to_bytes()}
    quantized = [
        _gguf_blocks(name, (2, 256), rng)
        for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                     "Q6_K", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ3_S", "TQ2_0", "MXFP4")
    ]  # fmt: skip
    norm = TensorEntry.from_array("blk.0.attn_norm.weight", np.ones(256, "f4"))
    seeds["quantized"] = GgufWriter([norm, *quantized], {"general.file_type": 7}).to_bytes()
    typed = {
        "u8": GgufValue(ValueType.UINT8, 255), "i8": GgufValue(ValueType.INT8, -128),
        "u16": GgufValue(ValueType.UINT16, 65535), "i16": GgufValue(ValueType.INT16, -1),
        "u32": GgufValue(ValueType.UINT32, 2**32 - 1),
        "u64": GgufValue(ValueType.UINT64, 2**64 - 1),
        "i64": GgufValue(ValueType.INT64, -(2**63)), "f64": GgufValue(ValueType.FLOAT64, 0.1),
        "nested": GgufValue(ValueType.ARRAY, [[1, 2], [3]], ValueType.ARRAY),
        "deep": GgufValue(ValueType.ARRAY, [[["x", "y"]], [["z"]]], ValueType.ARRAY),
        "general.alignment": GgufValue(ValueType.UINT32, 64),
    }  # fmt: skip
    small = [TensorEntry.from_array("w", np.arange(12, dtype="f4").reshape(3, 4))]
    seeds["typed-aligned"] = GgufWriter(small + quantized[4:5], typed).to_bytes()
    seeds["align-1"] = GgufWriter(small, {"general.alignment": 1}).to_bytes()
    edge = [
        TensorEntry.from_array("scalar", np.array(2.5, "f4")),
        TensorEntry.from_array("empty", np.zeros((0, 3), "f4")),
        TensorEntry.from_array("four", np.ones((1, 2, 1, 2), "f2")),
    ]
    tokens = ["<s>", "</s>", "\u2581the", "a", "b", "ab"] + [f"<0x{i:02X}>" for i in range(8)]
    vocab = {
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [float(-i) for i in range(len(tokens))],
        "tokenizer.ggml.token_type": GgufValue(
            ValueType.ARRAY, [1, 3] + [1] * (len(tokens) - 2), ValueType.INT32
        ),
        "tokenizer.ggml.merges": ["a b"], "tokenizer.chat_template": "{{ messages }}" * 20,
        "tokenizer.ggml.bytes": GgufValue(ValueType.ARRAY, ["\udcff\udcfe"], ValueType.STRING),
    }  # fmt: skip
    seeds["tokenizer-edge"] = GgufWriter(edge, vocab).to_bytes()
    seeds["none"] = GgufWriter([], {}).to_bytes()
    for label in ("plain", "typed-aligned"):  # big-endian, as s390x writers lay it out
        model = parse(seeds[label])
        assert model is not None
        flip_byte_order(model)
        seeds[f"{label}-be"] = encode(model)
    return seeds


def _set_index_seeds() -> dict[str, bytes]:
    from fuzz.index_targets import seed_indexes

    return seed_indexes("set-index")


def _dcp_index_seeds() -> dict[str, bytes]:
    """DCP indexes of the target's directory; one stores a ``torch.save`` payload as an opaque
    value, so the symbolic pickle machine is reached from the index too."""
    from fuzz.index_targets import seed_indexes

    return seed_indexes("dcp-index", opaque=_torch_bytes({"lr": 0.1, "names": ["a"]}))


GENERATORS: dict[str, Callable[[], dict[str, bytes]]] = {
    "burnpack": _burnpack_seeds,
    "safetensors": _safetensors_seeds,
    "pytorch": _pytorch_seeds,
    "gguf": _gguf_seeds,
    "set-index": _set_index_seeds,
    "dcp-index": _dcp_index_seeds,
}


def write_seeds(parsers: list[str]) -> None:
    for parser in parsers:
        folder = CORPUS / parser
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("seed-*"):
            old.unlink()
        seeds = GENERATORS[parser]()
        for name, data in seeds.items():
            (folder / f"seed-{name}").write_bytes(data)
        total = sum(len(d) for d in seeds.values())
        print(f"{parser}: {len(seeds)} seeds, {total:,} bytes in {folder}")


if __name__ == "__main__":
    sys.path.insert(0, str(CORPUS.parent.parent))  # the tar seed borrows the tests' helpers
    write_seeds(sys.argv[1:] or list(GENERATORS))
