"""`inspect` and `verify` name what a file that holds no weights is (issue 24): one error line,
exit 2, the cause in words, never a format's misleading complaint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli._support import ERROR_PREFIX
from tests.test_causes import CAUSES, IDS, POINTER
from weightstore.cli import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("cause", "content", "fragment"), CAUSES, ids=IDS)
@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin", "model.bpk"])
def test_inspect_names_the_cause(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    cause: str,
    content: bytes,
    fragment: str,
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    code, _, err = _run(capsys, "inspect", str(path))
    assert code == 2
    line = _one_error(err)
    assert line.startswith(f"{ERROR_PREFIX}{path}: is "), line
    assert fragment in line
    assert "limit" not in line and "starts with" not in line


@pytest.mark.parametrize(("cause", "content", "fragment"), CAUSES, ids=IDS)
def test_verify_fails_naming_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cause: str, content: bytes, fragment: str
) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    code, out, err = _run(capsys, "verify", str(path))
    assert code == 2
    assert _one_error(err) == f"{ERROR_PREFIX}{path}: verification failed (1 problem)"
    assert out.splitlines()[0] == f"{path}: FAILED"
    assert fragment in out.splitlines()[1]


def test_inspect_of_a_directory_holding_a_pointer_names_the_pointer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "model.safetensors").write_bytes(POINTER)
    code, _, err = _run(capsys, "inspect", str(tmp_path))
    assert code == 2
    line = _one_error(err)
    assert f"{tmp_path / 'model.safetensors'}: is a git-lfs pointer" in line
    assert "git lfs pull" in line and "limit" not in line


def test_verify_of_a_set_of_pointers_names_every_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    for name in names:
        (tmp_path / name).write_bytes(POINTER)
    weight_map = {f"t{i}": name for i, name in enumerate(names)}
    index = {"metadata": {}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    code, _, err = _run(capsys, "verify", str(tmp_path))
    assert code == 2
    line = _one_error(err)
    assert "is a git-lfs pointer" in line
    assert all(name in line for name in names), line


def test_unknown_bytes_are_shown_as_text_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"PAR1\x15\x04\x15\x10" + bytes(64))  # a Parquet file: binary, no cause
    code, _, err = _run(capsys, "inspect", str(path))
    assert code == 2
    assert _one_error(err).endswith("(starts with 50 41 52 31 15 04 15 10)")
    path.write_bytes(b"WEIGHTS!" + bytes(64))
    code, _, err = _run(capsys, "inspect", str(path))
    assert _one_error(err).endswith('(starts with 57 45 49 47 48 54 53 21 ("WEIGHTS!"))')
