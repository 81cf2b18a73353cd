"""`weightstore hash` and ``--check``, and ``verify --manifest``: sha256sum lines written, read
back and checked, every failure named, one error line at the end."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli._support import ERROR_PREFIX, torch_layout_arrays, write_weights
from weightstore.cli import _hash, main

WARNING_PREFIX = "weightstore: warning: "


def _run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, list[str], list[str]]:
    """`main` in-process: (exit code, stdout lines, stderr lines)."""
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out.splitlines(), err.splitlines()


def _errors(err: list[str]) -> list[str]:
    return [line for line in err if line.startswith(ERROR_PREFIX)]


def _folder(tmp_path: Path) -> Path:
    """A directory of a weights file, a config and a subfolder's file."""
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    write_weights("safetensors", folder / "model.safetensors", torch_layout_arrays())
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "sub" / "notes.txt").write_bytes(b"x" * 100)
    return folder


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_hash_prints_sha256sum_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path)
    monkeypatch.chdir(folder)
    names = ["config.json", "model.safetensors", "sub/notes.txt"]
    code, out, err = _run(capsys, "hash", *names)
    assert (code, err) == (0, [])
    assert out == [f"{_sha(folder / name)}  {name}" for name in names]
    sha256sum = shutil.which("sha256sum")
    if sha256sum is not None:  # coreutils agrees, byte for byte
        done = subprocess.run([sha256sum, *names], capture_output=True, text=True, check=True)
        assert out == done.stdout.splitlines()


def test_hash_of_a_file_larger_than_a_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks are joined right: a file of several chunks and a remainder hashes as one."""
    monkeypatch.setattr(_hash, "HASH_CHUNK_SIZE", 1000)
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(range(256)) * 17)  # 4,352 bytes: four chunks and a part
    code, out, _ = _run(capsys, "hash", path)
    assert code == 0 and out == [f"{_sha(path)}  {path}"]


def test_hash_names_every_file_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "a.bin"
    good.write_bytes(b"abc")
    code, out, err = _run(capsys, "hash", good, tmp_path / "gone.bin", tmp_path, "s3://b/k")
    assert code == 2
    assert out == [f"{_sha(good)}  {good}"]
    assert len(_errors(err)) == 1 and err == _errors(err)
    assert "3 of 4 files not hashed" in err[0] and "s3://b/k (a URL" in err[0]
    assert "gone.bin (missing)" in err[0] and f"{tmp_path} (a directory)" in err[0]


def test_check_reads_back_what_hash_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path)
    monkeypatch.chdir(folder)
    _, lines, _ = _run(capsys, "hash", "config.json", "model.safetensors")
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text("\n".join(lines) + "\n")
    code, out, err = _run(capsys, "hash", "--check", manifest)
    assert (code, err) == (0, [])
    assert out == ["config.json: OK", "model.safetensors: OK"]


def test_check_fails_a_changed_and_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path)
    monkeypatch.chdir(folder)
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(
        f"{_sha(folder / 'config.json')}  config.json\n"
        f"{_sha(folder / 'model.safetensors')} *model.safetensors\n"  # binary mode, as read back
        f"{'0' * 64}  gone.bin\n"
    )
    (folder / "config.json").write_text('{"a": 2}')  # same size, other bytes
    code, out, err = _run(capsys, "hash", "-c", manifest)
    assert code == 2
    assert out == [
        "config.json: FAILED",
        "model.safetensors: OK",
        "gone.bin: FAILED open or read",
    ]
    assert err == _errors(err) and len(err) == 1
    assert "2 of 3 files failed" in err[0]
    assert "config.json (the SHA-256 differs)" in err[0] and "gone.bin (missing)" in err[0]


def test_check_reads_sha256sum_output_with_escaped_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name with a backslash or newline round-trips in sha256sum's escaped form."""
    monkeypatch.chdir(tmp_path)
    odd = "odd\\name\nwith a newline.bin"
    (tmp_path / odd).write_bytes(b"payload")
    code, out, _ = _run(capsys, "hash", odd)
    assert code == 0 and out == [f"\\{_sha(tmp_path / odd)}  odd\\\\name\\nwith a newline.bin"]
    (tmp_path / "SUMS").write_text(out[0] + "\n")
    code, out, err = _run(capsys, "hash", "--check", "SUMS")
    assert (code, err) == (0, [])
    assert out == ["\\odd\\\\name\\nwith a newline.bin: OK"]


def test_check_warns_of_lines_that_are_no_checksum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"abc")
    (tmp_path / "SUMS").write_text(f"not a line\n\n{_sha(tmp_path / 'a.bin')}  a.bin\n")
    code, out, err = _run(capsys, "hash", "--check", "SUMS")
    assert code == 0 and out == ["a.bin: OK"]
    assert err == [f"{WARNING_PREFIX}SUMS: 1 line not '<sha256>  <path>' (line 1), skipped"]


def test_check_of_a_manifest_without_a_checksum_line_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "SUMS"
    manifest.write_text("hello\n")
    code, out, err = _run(capsys, "hash", "--check", manifest)
    assert code == 2 and out == []
    assert err == _errors(err) and len(err) == 1 and "no '<sha256>  <path>' line" in err[0]


def test_check_and_files_together_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "hash", "--check", tmp_path / "SUMS", tmp_path / "a")
    assert code == 2 and len(_errors(err)) == 1 and "give no FILE" in err[0]
    code, _, err = _run(capsys, "hash")
    assert code == 2 and len(_errors(err)) == 1 and "--check MANIFEST" in err[0]


def test_a_line_at_the_length_limit_is_read_and_one_past_it_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_hash, "MAX_MANIFEST_LINE", 100)
    name = "n" * (100 - 66 - 1)  # digest, two spaces, name and the newline: 100 bytes
    (tmp_path / name).write_bytes(b"abc")
    (tmp_path / f"{name}x").write_bytes(b"abc")
    digest = _sha(tmp_path / name)
    (tmp_path / "SUMS").write_text(f"{digest}  {name}\n{digest}  {name}x\n")
    code, out, err = _run(capsys, "hash", "--check", "SUMS")
    assert code == 0 and out == [f"{name}: OK"]
    assert err == [f"{WARNING_PREFIX}SUMS: 1 line not '<sha256>  <path>' (line 2), skipped"]


def test_a_manifest_at_the_entry_limit_is_read_and_one_past_it_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_hash, "MAX_MANIFEST_ENTRIES", 3)
    (tmp_path / "a.bin").write_bytes(b"abc")
    line = f"{_sha(tmp_path / 'a.bin')}  a.bin\n"
    (tmp_path / "SUMS").write_text(line * 3)
    assert _run(capsys, "hash", "--check", "SUMS")[:2] == (0, ["a.bin: OK"] * 3)
    (tmp_path / "SUMS").write_text(line * 4)
    code, out, err = _run(capsys, "hash", "--check", "SUMS")
    assert code == 2 and out == []
    assert len(_errors(err)) == 1 and "more than 3 checksum lines" in err[0]


def _manifest_of(folder: Path, names: list[str], path: Path) -> Path:
    path.write_text("".join(f"{_sha(folder / name)}  {name}\n" for name in names))
    return path


def test_verify_manifest_passes_a_matching_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path)
    names = ["config.json", "model.safetensors", "sub/notes.txt"]
    manifest = _manifest_of(folder, names, tmp_path / "SUMS")
    code, out, err = _run(capsys, "verify", "--manifest", manifest, folder)
    assert (code, err) == (0, [])
    assert out[0].startswith(f"{folder}: ok (safetensors, 11 tensors")
    assert f"  note: manifest {manifest}: 3 files checked, 0 failed" in out


def test_verify_manifest_names_a_changed_and_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path)
    manifest = _manifest_of(folder, ["config.json", "sub/notes.txt"], tmp_path / "SUMS")
    with manifest.open("a") as file:
        file.write(f"{'0' * 64}  gone.bin\n{'0' * 64}  ../escape.bin\n")
    (folder / "sub" / "notes.txt").write_bytes(b"y" * 100)
    code, out, err = _run(capsys, "verify", "--manifest", manifest, folder)
    assert code == 2
    assert out[0] == f"{folder}: FAILED (safetensors, 11 tensors, 720 bytes read)"
    assert "  sub/notes.txt: the SHA-256 differs (manifest line 2)" in out
    assert "  gone.bin: missing (manifest line 3)" in out
    assert "  ../escape.bin: outside the directory (manifest line 4)" in out
    assert _errors(err) == [f"{ERROR_PREFIX}{folder}: verification failed (3 problems)"]
    # model.safetensors is in the folder but not the manifest: a warning, no failure
    assert f"{WARNING_PREFIX}{folder}: 1 file not in the manifest: model.safetensors" in err


def test_verify_manifest_inside_the_directory_is_not_unlisted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path)
    names = ["config.json", "model.safetensors", "sub/notes.txt"]
    manifest = _manifest_of(folder, names, folder / "SHA256SUMS")
    code, _, err = _run(capsys, "verify", "--manifest", manifest, folder)
    assert (code, err) == (0, [])


def test_verify_manifest_of_a_file_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path)
    manifest = _manifest_of(folder, ["config.json"], tmp_path / "SUMS")
    code, out, err = _run(capsys, "verify", "--manifest", manifest, folder / "model.safetensors")
    assert code == 2 and "checks a directory" in out[1]
    assert len(_errors(err)) == 1
