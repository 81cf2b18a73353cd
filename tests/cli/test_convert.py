"""`weightstore convert`: every readable format into every writable one, each flag checked on the
file written (read back with the readers), and every refusal as one error line."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tests.cli._support import (
    FORMAT_SUFFIX,
    assert_error,
    burn_layout_arrays,
    read_metadata,
    read_weights,
    run_cli,
    torch_layout_arrays,
    write_weights,
)
from weightstore.cli import main

SOURCES = ["burnpack", "safetensors", "pytorch"]
DESTINATIONS = ["burnpack", "safetensors"]


def _source(tmp_path: Path, fmt: str, arrays: dict[str, Any] | None = None) -> Path:
    path = tmp_path / f"source{FORMAT_SUFFIX[fmt]}"
    return write_weights(fmt, path, torch_layout_arrays() if arrays is None else arrays)


def _assert_same(found: dict[str, Any], expected: dict[str, Any]) -> None:
    assert sorted(found) == sorted(expected)
    for name, array in expected.items():
        assert found[name].dtype == array.dtype, name
        np.testing.assert_array_equal(found[name], array, err_msg=name)


@pytest.mark.parametrize("destination", DESTINATIONS)
@pytest.mark.parametrize("source", SOURCES)
def test_every_pair_converts_exactly(tmp_path: Path, source: str, destination: str) -> None:
    src = _source(tmp_path, source)
    dst = tmp_path / f"out{FORMAT_SUFFIX[destination]}"
    done = run_cli("convert", src, dst)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout == f"wrote {dst} ({destination}): 11 tensors, {dst.stat().st_size:,} bytes\n"
    _assert_same(read_weights(dst), torch_layout_arrays())


def test_to_burn_transposes_linear_and_renames_norms(tmp_path: Path) -> None:
    src = _source(tmp_path, "safetensors")
    dst = tmp_path / "burn.bpk"
    assert run_cli("convert", src, dst, "--to-burn").returncode == 0
    found, torch_names = read_weights(dst), torch_layout_arrays()
    burn = burn_layout_arrays()
    burn["bn.num_batches_tracked"] = torch_names["bn.num_batches_tracked"]  # Burn ignores it
    _assert_same(found, burn)


def test_from_burn_is_the_inverse(tmp_path: Path) -> None:
    src = write_weights("burnpack", tmp_path / "burn.bpk", burn_layout_arrays())
    dst = tmp_path / "torch.safetensors"
    assert run_cli("convert", src, dst, "--from-burn").returncode == 0
    expected = torch_layout_arrays()
    del expected["bn.num_batches_tracked"]  # the Burn file never had it
    _assert_same(read_weights(dst), expected)


def test_to_burn_on_a_file_already_in_burn_layout_is_refused(tmp_path: Path) -> None:
    src = write_weights("burnpack", tmp_path / "burn.bpk", burn_layout_arrays())
    done = run_cli("convert", src, tmp_path / "twice.bpk", "--to-burn")
    assert_error(done, 2, "'fc.bias'", "laid out the other way than --to-burn expects")
    assert not (tmp_path / "twice.bpk").exists()


def test_an_ambiguous_owner_needs_module_type(tmp_path: Path) -> None:
    arrays = {**torch_layout_arrays(), "emb.weight": np.ones((6, 5), np.float32)}
    src = _source(tmp_path, "safetensors", arrays)
    refused = run_cli("convert", src, tmp_path / "a.bpk", "--to-burn")
    assert_error(refused, 2, "'emb.weight'", "Linear or Embedding", "--module-type")
    done = run_cli(
        "convert", src, tmp_path / "a.bpk", "--to-burn", "--module-type", "^emb=Embedding"
    )
    assert done.returncode == 0, done.stderr
    found = read_weights(tmp_path / "a.bpk")
    np.testing.assert_array_equal(found["emb.weight"], arrays["emb.weight"])  # not transposed
    assert found["fc.weight"].shape == (7, 5)
    as_linear = run_cli(
        "convert", src, tmp_path / "b.bpk", "--to-burn", "--module-type", "emb=Embedding",
        "--module-type", "^emb\\.=Linear",
    )  # fmt: skip
    assert as_linear.returncode == 0, as_linear.stderr  # the last rule that matches wins
    assert read_weights(tmp_path / "b.bpk")["emb.weight"].shape == (5, 6)


def test_half_casts_all_but_batch_norm(tmp_path: Path) -> None:
    arrays = {**torch_layout_arrays(), "emb.weight": np.ones((6, 5), np.float32)}
    src = _source(tmp_path, "burnpack", arrays)
    dst = tmp_path / "half.safetensors"
    done = run_cli("convert", src, dst, "--half")  # emb is Linear or Embedding: both halve
    assert done.returncode == 0, done.stderr
    found = read_weights(dst)
    for name, array in arrays.items():
        expected = np.float16 if name.split(".")[0] in {"conv", "ln", "fc", "emb"} else array.dtype
        assert found[name].dtype == expected, name
        np.testing.assert_allclose(found[name].astype(np.float64), array, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("flag", "dtype"),
    [("bf16", ml_dtypes.bfloat16), ("f16", np.float16), ("f32", np.float32)],
)
def test_dtype_casts_every_float(tmp_path: Path, flag: str, dtype: Any) -> None:
    arrays = {name: array.astype(np.float16) if array.dtype == np.float32 else array
              for name, array in torch_layout_arrays().items()}  # fmt: skip
    src = _source(tmp_path, "safetensors", arrays)
    dst = tmp_path / "cast.bpk"
    assert run_cli("convert", src, dst, "--dtype", flag).returncode == 0
    found = read_weights(dst)
    assert found["bn.num_batches_tracked"].dtype == np.int64  # not a float: untouched
    for name in arrays:
        if name != "bn.num_batches_tracked":
            assert found[name].dtype == dtype, name
            np.testing.assert_allclose(
                found[name].astype(np.float64), arrays[name].astype(np.float64), rtol=1e-2
            )


def test_filter_remap_metadata_and_top_level_key(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arrays = torch_layout_arrays()
    src = tmp_path / "ckpt.pt"
    state = {name: torch.from_numpy(array) for name, array in arrays.items()}
    torch.save({"model": state, "epoch": 3}, src)
    dst = tmp_path / "picked.safetensors"
    done = run_cli(
        "convert", src, dst, "--top-level-key", "model", "--filter", "^fc\\.", "--filter", "^ln",
        "--remap", "^fc\\.(.*)=head.$1", "--remap", "^head\\.bias=head.b",
        "--metadata", "run=7", "--metadata", "note=a=b",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "4 tensors" in done.stdout
    found = read_weights(dst)
    assert sorted(found) == ["head.b", "head.weight", "ln.bias", "ln.weight"]
    np.testing.assert_array_equal(found["head.b"], arrays["fc.bias"])
    metadata = read_metadata(dst)
    assert metadata["run"] == "7" and metadata["note"] == "a=b"
    assert metadata["format"] == "pt"  # a PyTorch source: SafeTensors names the framework


def test_source_metadata_is_carried_and_flags_override_it(tmp_path: Path) -> None:
    src = write_weights("safetensors", tmp_path / "s.safetensors", torch_layout_arrays(),
                        {"note": "kept", "run": "1", "producer": "someone"})  # fmt: skip
    dst = tmp_path / "d.bpk"
    assert run_cli("convert", src, dst, "--metadata", "run=2").returncode == 0
    metadata = read_metadata(dst)
    assert metadata["note"] == "kept" and metadata["run"] == "2"
    assert metadata["producer"] == "weightstore" and metadata["format"] == "burnpack"


def test_list_indices_keep_their_numbers(tmp_path: Path) -> None:
    arrays = {"seq.0.weight": np.ones(2, np.float32), "seq.2.weight": np.zeros(2, np.float32)}
    src = _source(tmp_path, "pytorch", arrays)
    dst = tmp_path / "gaps.safetensors"
    assert run_cli("convert", src, dst).returncode == 0
    assert sorted(read_weights(dst)) == ["seq.0.weight", "seq.2.weight"]


def test_format_flag_and_extension_rules(tmp_path: Path) -> None:
    src = _source(tmp_path, "safetensors")
    done = run_cli("convert", src, tmp_path / "model", "--format", "burnpack")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "model.bpk").exists()  # Burn's rule: an extensionless path gets .bpk
    assert "(burnpack)" in done.stdout and "model.bpk" in done.stdout
    done = run_cli("convert", src, tmp_path / "weights.bin", "--format", "safetensors")
    assert done.returncode == 0, done.stderr
    assert read_metadata(tmp_path / "weights.bin")["format"] == "safetensors"
    assert_error(run_cli("convert", src, tmp_path / "out.xyz"), 2, "out.xyz", "--format")
    assert_error(run_cli("convert", src, tmp_path / "out.pt"), 2, "cannot be written")
    bad = run_cli("convert", src, tmp_path / "o.bpk", "--format", "pytorch")
    assert_error(bad, 2, "invalid choice: 'pytorch'")


def test_overwrite(tmp_path: Path) -> None:
    src = _source(tmp_path, "burnpack")
    dst = tmp_path / "out.safetensors"
    dst.write_bytes(b"old")
    assert_error(run_cli("convert", src, dst), 2, f"{dst}: file exists; pass --overwrite")
    assert dst.read_bytes() == b"old"
    assert run_cli("convert", src, dst, "--overwrite").returncode == 0
    _assert_same(read_weights(dst), torch_layout_arrays())


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--filter", "("], ["error: --filter: regex '(' does not compile"]),
        (["--remap", "(=x"], ["error: --remap: regex '(' does not compile"]),
        (["--to-burn", "--module-type", "(=Linear"], ["error: --module-type: regex '('"]),
        (["--remap", "no-equals-sign"], ["is not PATTERN=REPLACEMENT"]),
        (["--metadata", "=x"], ["is not KEY=VALUE"]),
        (["--half", "--dtype", "f16"], ["not allowed with argument --half"]),
        (["--to-burn", "--from-burn"], ["not allowed with argument --to-burn"]),
        (["--dtype", "f64"], ["invalid choice: 'f64'"]),
        (["--top-level-key", "model"], ["source.bpk", "no option 'top_level_key'"]),
    ],
)
def test_bad_options_are_one_line(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    src = _source(tmp_path, "burnpack")
    done = run_cli("convert", src, tmp_path / "out.bpk", *args)
    assert_error(done, 2, *fragments)
    assert not (tmp_path / "out.bpk").exists()


def test_bad_sources(tmp_path: Path) -> None:
    missing = tmp_path / "missing.safetensors"
    assert_error(run_cli("convert", missing, tmp_path / "o.bpk"), 2, str(missing))
    damaged = tmp_path / "damaged.bpk"
    damaged.write_bytes(_source(tmp_path, "burnpack").read_bytes()[:-5])
    assert_error(run_cli("convert", damaged, tmp_path / "o.bpk"), 2, str(damaged), "truncated")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a weight file at all")
    assert_error(run_cli("convert", junk, tmp_path / "o.bpk"), 2, str(junk))
    assert not (tmp_path / "o.bpk").exists()


def test_hostile_names_convert_or_are_refused_cleanly(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    src = tmp_path / "names.pt"
    torch.save({"line\nbreak": torch.ones(1), "\x1b[31mred": torch.zeros(1)}, src)
    done = run_cli("convert", src, tmp_path / "names.safetensors")
    assert done.returncode == 0, done.stderr
    assert sorted(read_weights(tmp_path / "names.safetensors")) == ["\x1b[31mred", "line\nbreak"]
    torch.save({"a\ud800b": torch.ones(1)}, tmp_path / "surrogate.pt")
    refused = run_cli("convert", tmp_path / "surrogate.pt", tmp_path / "s.safetensors")
    assert_error(refused, 2, "tensor 'a\\ud800b'")


def test_a_surrogate_name_into_burnpack_is_refused_as_bad_input(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"a\ud800b": torch.ones(1)}, tmp_path / "surrogate.pt")
    done = run_cli("convert", tmp_path / "surrogate.pt", tmp_path / "s.bpk")
    assert_error(done, 2, "tensor 'a\\ud800b'")


def test_convert_holds_one_tensor_at_a_time(tmp_path: Path) -> None:
    # In-process, to count what NumPy allocates (tracemalloc sees it; the mapped file it reads
    # from is the page cache's, not the process's). 16 tensors of 4 MiB cast to f16: holding
    # them all would take 32 MiB, one at a time takes 2 MiB plus the reader's and writer's own.
    arrays = {f"layer.{i}.weight": np.full((1024, 1024), i, np.float32) for i in range(16)}
    src = write_weights("safetensors", tmp_path / "big.safetensors", arrays)
    tracemalloc.start()
    try:
        assert main(["convert", str(src), str(tmp_path / "half.bpk"), "--dtype", "f16"]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * 2**20, f"peak {peak:,} bytes"
    assert read_weights(tmp_path / "half.bpk")["layer.15.weight"][0, 0] == 15


def test_a_checkpoint_converts_releasing_each_tensor_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The mapped pages of a tensor already written leave the process's resident memory, so a
    # checkpoint larger than memory converts holding about one tensor (`_streaming_reader`).
    torch = pytest.importorskip("torch")
    from weightstore.pytorch_reader import PytorchReader

    state = {f"layer.{i}.weight": torch.full((64, 64), float(i)) for i in range(4)}
    torch.save(state, tmp_path / "model.pt")
    released: list[str] = []
    original = PytorchReader.release

    def record(reader: PytorchReader, name: str) -> None:
        released.append(name)
        original(reader, name)

    monkeypatch.setattr(PytorchReader, "release", record)
    assert main(["convert", str(tmp_path / "model.pt"), str(tmp_path / "m.safetensors")]) == 0
    assert len(released) == len(set(released)) == len(state) - 1  # each once, but the last
    assert set(released) < set(state)
    written = read_weights(tmp_path / "m.safetensors")
    for name, tensor in state.items():
        np.testing.assert_array_equal(written[name], tensor.numpy())
