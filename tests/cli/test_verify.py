"""`weightstore verify`: good files pass; truncated files, corrupted headers, missing storages and
pickles that name code-running globals fail with a report and exit code 2."""

from __future__ import annotations

import builtins
import os
import zipfile
from pathlib import Path

import pytest

from tests.cli._support import (
    FORMAT_SUFFIX,
    CallsGlobal,
    assert_error,
    run_cli,
    torch_layout_arrays,
    write_pickle,
    write_weights,
)

ALL_BYTES = sum(array.nbytes for array in torch_layout_arrays().values())


def _file(tmp_path: Path, fmt: str) -> Path:
    return write_weights(fmt, tmp_path / f"model{FORMAT_SUFFIX[fmt]}", torch_layout_arrays())


@pytest.mark.parametrize("fmt", ["burnpack", "safetensors", "pytorch"])
def test_good_files_pass(tmp_path: Path, fmt: str) -> None:
    path = _file(tmp_path, fmt)
    done = run_cli("verify", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{path}: ok ({fmt}, 11 tensors, {ALL_BYTES:,} bytes read)\n"
    assert done.stderr == ""


@pytest.mark.parametrize("fmt", ["burnpack", "safetensors", "pytorch"])
def test_a_truncated_file_fails(tmp_path: Path, fmt: str) -> None:
    path = _file(tmp_path, fmt)
    path.write_bytes(path.read_bytes()[:-3])
    done = run_cli("verify", path)
    assert_error(done, 2, f"{path}: verification failed (1 problem)")
    report = done.stdout.splitlines()
    assert report[0] == f"{path}: FAILED" and len(report) == 2  # the file-level reason below


@pytest.mark.parametrize(
    ("fmt", "old", "new", "what"),
    [
        ("burnpack", b"data_offsets", b"data_offsetZ", "data_offsets"),  # a key of the CBOR
        ("safetensors", b'"dtype"', b'"dtypZ"', "dtype"),  # a key of the JSON
        ("safetensors", b'":', b'";', "JSON"),  # the JSON's syntax
    ],
)
def test_a_corrupted_header_byte_fails(
    tmp_path: Path, fmt: str, old: bytes, new: bytes, what: str
) -> None:
    path = _file(tmp_path, fmt)
    data = path.read_bytes()
    at = data.index(old)
    path.write_bytes(data[:at] + new + data[at + len(old) :])
    done = run_cli("verify", path)
    assert done.returncode == 2
    assert done.stdout.startswith(f"{path}: FAILED\n")
    assert what in done.stdout or what.lower() in done.stdout.lower(), done.stdout


def test_a_missing_storage_fails_that_tensor_and_the_rest_are_read(tmp_path: Path) -> None:
    path = _file(tmp_path, "pytorch")
    damaged = tmp_path / "damaged.pt"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(damaged, "w") as target:
        for info in source.infolist():
            if not info.filename.endswith("/data/0"):  # the first tensor's storage
                target.writestr(info, source.read(info))
    done = run_cli("verify", damaged)
    assert done.returncode == 2
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{damaged}: FAILED (pytorch, 10 tensors, ")
    assert lines[1] == "  tensor 'conv.weight': storage '0' is not in the file"


@pytest.mark.parametrize(
    ("function", "qualname"), [(os.system, f"{os.system.__module__}.system"),
                               (builtins.eval, "builtins.eval")],
)  # fmt: skip
def test_a_pickle_naming_code_fails_unless_allowed(
    tmp_path: Path, function: object, qualname: str
) -> None:
    path = write_pickle(tmp_path / "evil.pkl", {"config": {"hook": CallsGlobal(function, "1")}})
    refused = run_cli("verify", path)
    assert_error(refused, 2, f"{path}: verification failed (1 problem)")
    assert f"suspicious global {qualname} at 'config.hook'" in refused.stdout
    assert "pass --allow-objects" in refused.stdout
    allowed = run_cli("verify", path, "--allow-objects")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.startswith(f"{path}: ok (pytorch, 0 tensors, 0 bytes read)\n")
    assert "allowed by --allow-objects" in allowed.stdout


def test_a_torch_checkpoint_naming_os_system_fails(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "extra": [CallsGlobal(os.system, "true")]}, path)
    done = run_cli("verify", path, "--top-level-key", "w")  # the scan covers the whole file
    assert_error(done, 2, "verification failed")
    assert "ok" not in done.stdout.splitlines()[0]
    assert f"{os.system.__module__}.system at 'extra.0'" in done.stdout


def test_several_files_each_get_a_line(tmp_path: Path) -> None:
    good = _file(tmp_path, "safetensors")
    missing = tmp_path / "missing.bpk"
    done = run_cli("verify", good, missing)
    assert done.returncode == 2
    lines = done.stdout.splitlines()
    assert lines[:2] == [
        f"{good}: ok (safetensors, 11 tensors, {ALL_BYTES:,} bytes read)",
        f"{missing}: FAILED",
    ]
    assert len(lines) == 3 and lines[2] in ("  does not exist", "  no such file or directory")
    assert done.stderr == f"weightstore: error: {missing}: verification failed (1 problem)\n"


def test_top_level_key_on_a_format_without_keys_fails(tmp_path: Path) -> None:
    path = _file(tmp_path, "burnpack")
    done = run_cli("verify", path, "--top-level-key", "model")
    assert done.returncode == 2
    assert "no top-level keys" in done.stdout
