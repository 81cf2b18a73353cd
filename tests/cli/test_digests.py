"""`convert --digests[=ALG]` writes digests that travel with the file; `verify` checks every
digest present, names the tensors that carry none, and fails a changed byte with exit 2 and
one error line (docs/integrity.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._optional import need
from tests.cli._support import (
    FORMAT_SUFFIX,
    assert_error,
    run_cli,
    torch_layout_arrays,
    write_weights,
)
from weightstore import open_reader
from weightstore.io._digest import METADATA_KEY, digest_of


def _source(tmp_path: Path) -> Path:
    return write_weights("safetensors", tmp_path / "src.safetensors", torch_layout_arrays())


def _flip(path: Path, tensor: str) -> None:
    with open_reader(path) as reader:
        offset = reader.data_start + reader.descriptor(tensor).data_offsets[0]
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("fmt", ["burnpack", "safetensors"])
def test_convert_digests_sha256_writes_each_tensors_digest(tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / f"out{FORMAT_SUFFIX[fmt]}"
    done = run_cli("convert", _source(tmp_path), dst, "--digests=sha256", "-q")
    assert done.returncode == 0, done.stderr
    with open_reader(dst) as reader:
        digests = json.loads(reader.metadata()[METADATA_KEY])
        assert digests["algorithm"] == "sha256"
        for name in reader.names():
            assert digests["tensors"][name] == digest_of("sha256", reader.get_bytes(name))


def test_convert_digests_without_a_name_uses_the_default(tmp_path: Path) -> None:
    need("xxhash")
    dst = tmp_path / "out.safetensors"
    done = run_cli("convert", _source(tmp_path), dst, "--digests", "-q")
    assert done.returncode == 0, done.stderr
    with open_reader(dst) as reader:
        assert json.loads(reader.metadata()[METADATA_KEY])["algorithm"] == "xxh3_128"


def test_convert_refuses_an_unknown_algorithm(tmp_path: Path) -> None:
    done = run_cli("convert", _source(tmp_path), tmp_path / "o.safetensors", "--digests=md5")
    assert_error(done, 2, "--digests", "unknown digest algorithm 'md5'")
    assert not (tmp_path / "o.safetensors").exists()


def test_verify_notes_the_digests_checked(tmp_path: Path) -> None:
    dst = tmp_path / "out.bpk"
    assert run_cli("convert", _source(tmp_path), dst, "--digests=sha256", "-q").returncode == 0
    done = run_cli("verify", dst)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["  note: digests checked: 11 tensors"]


def test_verify_fails_a_changed_byte_with_one_error_line(tmp_path: Path) -> None:
    dst = tmp_path / "out.safetensors"
    assert run_cli("convert", _source(tmp_path), dst, "--digests=sha256", "-q").returncode == 0
    _flip(dst, "fc.bias")
    done = run_cli("verify", dst)
    assert_error(done, 2, f"{dst}: verification failed (1 problem)")
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{dst}: FAILED")
    assert lines[1].startswith("  tensor 'fc.bias': sha256 digest mismatch: expected ")
    assert lines[2] == "  note: digests checked: 10 tensors"


def test_verify_names_tensors_without_a_digest(tmp_path: Path) -> None:
    from weightstore.io._digest import encode_digests

    arrays = torch_layout_arrays()
    digests = {"fc.bias": digest_of("sha256", arrays["fc.bias"].tobytes())}
    path = write_weights(
        "safetensors", tmp_path / "some.safetensors", arrays,
        {METADATA_KEY: encode_digests("sha256", digests)},
    )  # fmt: skip
    done = run_cli("verify", path)
    assert done.returncode == 0, done.stderr
    notes = done.stdout.splitlines()[1:]
    assert notes[0] == "  note: digests checked: 1 tensor"
    assert notes[1:] == [
        f"  note: tensor {n!r} carries no digest" for n in sorted(arrays) if n != "fc.bias"
    ]


def test_verify_of_a_file_without_digests_is_unchanged(tmp_path: Path) -> None:
    done = run_cli("verify", _source(tmp_path))
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1


def test_verify_fails_a_set_shard_whose_bytes_changed(tmp_path: Path) -> None:
    out = tmp_path / "set"
    done = run_cli(
        "convert", _source(tmp_path), out, "--max-shard-size", "600", "--digests=sha256", "-q"
    )
    assert done.returncode == 0, done.stderr
    assert run_cli("verify", out).returncode == 0
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shard = out / index["weight_map"]["fc.weight"]
    shard.write_bytes(shard.read_bytes().replace(b"weightstore", b"weightstorf", 1))
    done = run_cli("verify", out)
    assert_error(done, 2, "verification failed (1 problem)")
    assert "sha256 digest mismatch" in done.stdout and shard.name in done.stdout
