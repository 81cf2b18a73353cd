"""`weightstore inspect`: several files, --filter, --json types, --version, PyTorch objects and
suspicious globals, storage offsets, and names that try to break the output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.cli._support import (
    CallsGlobal,
    assert_error,
    run_cli,
    torch_layout_arrays,
    write_pickle,
    write_weights,
)
from weightstore import __version__

SYSTEM = f"{os.system.__module__}.system"  # posix.system on Linux and macOS, nt.system on Windows


def test_version() -> None:
    done = run_cli("--version")
    assert (done.returncode, done.stdout) == (0, f"weightstore {__version__}\n")


def test_several_files_and_a_filter(tmp_path: Path) -> None:
    a = write_weights("burnpack", tmp_path / "a.bpk", torch_layout_arrays())
    b = write_weights("safetensors", tmp_path / "b.safetensors", {"w": np.ones(3, np.float32)})
    done = run_cli("inspect", a, b, "--filter", r"^(fc|w$)")
    assert done.returncode == 0, done.stderr
    reports = done.stdout.split("\n\nfile:")  # one blank line between two reports
    assert len(reports) == 2
    reports[1] = "file:" + reports[1]
    assert reports[0].startswith(f"file:     {a} (") and reports[1].startswith(f"file:     {b} (")
    assert "fc.weight" in reports[0] and "conv.weight" not in reports[0]
    assert reports[0].rstrip().endswith("total: 2 tensors (of 11), 40 elements, 160 bytes")
    assert reports[1].rstrip().endswith("total: 1 tensor (of 1), 3 elements, 12 bytes")


def test_json_for_several_files_is_a_list_and_errors_are_entries(tmp_path: Path) -> None:
    a = write_weights("safetensors", tmp_path / "a.safetensors", {"w": np.ones(1, np.float32)})
    missing = tmp_path / "missing.bpk"
    done = run_cli("inspect", a, missing, "--json", "--filter", "w")
    assert_error(done, 2, f"{missing}: ")
    first, second = json.loads(done.stdout)
    assert first["tensors"][0]["name"] == "w" and first["tensors_before_filter"] == 1
    assert second["path"] == str(missing) and second["error"].startswith(f"{missing}: ")


def test_pytorch_objects_metadata_and_storage_offsets(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "ckpt.pt"
    storage = torch.arange(10, dtype=torch.float32)
    config = {"lr": 0.5, "layers": [1, 2], "name": "run", "ok": True, "none": None}
    torch.save({"a": storage[:4], "b": storage[6:], "epoch": 3, "config": config}, path)
    document = json.loads(run_cli("inspect", path, "--json").stdout)
    assert document["metadata"]["pickle_protocol"] == 2  # a number, not "2"
    assert document["others"] == {"epoch": 3, "config": config}
    rows = {row["name"]: row for row in document["tensors"]}
    assert rows["b"]["storage"] == rows["a"]["storage"]  # one storage, two views
    assert (rows["a"]["offset"], rows["b"]["offset"]) == (0, 24)
    assert document["suspicious_globals"] == [] and document["scan_complete"] is True
    text = run_cli("inspect", path).stdout
    assert "objects:\n  epoch: 3\n  config: {" in text
    assert "storage:offset" in text and f"{rows['b']['storage']}:24" in text
    assert text.rstrip().endswith("total: 2 tensors, 8 elements, 32 bytes")


def test_a_bare_os_system_pickle_is_shown_and_flagged(tmp_path: Path) -> None:
    path = write_pickle(tmp_path / "evil.pt", CallsGlobal(os.system, "echo hi"))
    done = run_cli("inspect", path)
    assert_error(done, 2, str(path), f"the pickle names {SYSTEM}", "--allow-objects")
    assert f'(the whole file): {{"object": "{SYSTEM}", "args": ["echo hi"]}}' in done.stdout
    assert "suspicious globals (torch.load would run these" in done.stdout
    assert f"  {SYSTEM}  at (the whole file)" in done.stdout
    assert done.stdout.rstrip().endswith("total: 0 tensors, 0 elements, 0 bytes")
    allowed = run_cli("inspect", path, "--allow-objects", "--json")
    assert allowed.returncode == 0, allowed.stderr
    document = json.loads(allowed.stdout)
    assert document["others"][""] == {"object": SYSTEM, "args": ["echo hi"]}
    module, name = SYSTEM.split(".")
    assert document["suspicious_globals"] == [{"module": module, "name": name, "where": ""}]


def test_a_nested_global_is_flagged_with_its_place(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "nested.pt"
    torch.save({"w": torch.ones(1), "cfg": {"hook": CallsGlobal(eval, "1+1")}}, path)
    done = run_cli("inspect", path)
    assert_error(done, 2, "the pickle names builtins.eval")
    assert "  builtins.eval  at 'cfg.hook'" in done.stdout
    assert "  cfg: {'hook': <inert builtins.eval object>}" in done.stdout
    assert "total: 1 tensor," in done.stdout


def test_hostile_names_stay_on_their_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "names.pt"
    names = ["a\ud800b", "line\nbreak", "\x1b[31mred", "rtl\u202eexe"]
    torch.save({name: torch.ones(1) for name in names}, path)
    text = run_cli("inspect", path)
    assert text.returncode == 0, text.stderr
    rows = text.stdout.splitlines()
    for shown in ["a\\ud800b", "line\\nbreak", "\\x1b[31mred", "rtl\\u202eexe"]:
        assert any(row.startswith(shown + " ") for row in rows), shown
    assert "\x1b" not in text.stdout and "\u202e" not in text.stdout
    document = run_cli("inspect", path, "--json")
    assert document.stdout.isascii()
    assert [row["name"] for row in json.loads(document.stdout)["tensors"]] == names


def test_bad_files_are_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.bpk"
    empty.write_bytes(b"")
    assert_error(run_cli("inspect", empty), 2, str(empty))
    assert_error(run_cli("inspect", tmp_path), 2, str(tmp_path))
    assert_error(run_cli("inspect", tmp_path / "nope.bpk", "--filter", "("), 2, "--filter")
    assert_error(run_cli("inspect"), 2, "the following arguments are required: PATH")


def test_a_tensor_numpy_cannot_hold_is_listed_not_fatal(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "wide.pt"
    torch.save({"ok": torch.ones(2), "wide": torch.ones([1] * 65)}, path)
    done = run_cli("inspect", path)
    assert done.returncode == 0, done.stderr
    assert "wide" in done.stdout and "unreadable tensor" in done.stdout


def test_fuzz_cli_target_builds_each_commands_parser_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fuzz harness caches what `cli.main` calls for its parser; a miss would rebuild it on
    every input and slow the fuzzer about fivefold."""
    from fuzz import targets
    from weightstore import cli
    from weightstore.entry import TensorEntry
    from weightstore.safetensors import write_bytes

    built: list[str | None] = []
    real = targets._PARSER_FOR
    monkeypatch.setattr(
        targets, "_PARSER_FOR", lambda command: built.append(command) or real(command)
    )
    targets._cli_parser.cache_clear()
    path = tmp_path / "m.safetensors"
    path.write_bytes(write_bytes([TensorEntry.from_array("w", np.ones(2, np.float32))]))
    try:
        targets._cli(str(path))
        targets._cli(str(path))
    finally:
        targets._cli_parser.cache_clear()
    assert sorted(map(str, built)) == ["inspect", "verify"]
    assert cli._parser_for is not targets._cli_parser  # put back after each call
