"""Failures are one line and an exit code: usage errors, bad input (2), internal errors (3, the
traceback only with --debug), and the text escaping every line goes through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._support import ERROR_PREFIX, assert_error, run_cli
from weightstore.cli import main
from weightstore.cli._errors import describe
from weightstore.cli._text import dump_json, plural, printable
from weightstore.errors import DestinationExistsError, FileMissingError, HeaderError

# Runs the CLI with `inspect`'s summarizer replaced by one that fails like a bug would.
FAULTY_CLI = """
import sys
import weightstore.cli._inspect as command
def boom(*args, **kwargs):
    raise ZeroDivisionError("a bug\\nwith two lines")
command.summarize = boom
from weightstore.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _faulty(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", FAULTY_CLI, *args], capture_output=True, text=True, check=False
    )


def test_an_internal_error_is_one_line_and_exit_3(tmp_path: Path) -> None:
    done = _faulty("inspect", str(tmp_path / "x.bpk"))
    assert_error(done, 3, f"{tmp_path / 'x.bpk'}: internal error: ZeroDivisionError: a bug\\nwith")
    assert "--debug" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_prints_the_traceback_first(tmp_path: Path, where: str) -> None:
    path = str(tmp_path / "x.bpk")
    args = ["--debug", "inspect", path] if where == "before" else ["inspect", path, "--debug"]
    done = _faulty(*args)
    assert done.returncode == 3
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert done.stderr.splitlines()[-1].startswith(ERROR_PREFIX)


def test_usage_errors_are_one_line() -> None:
    assert_error(run_cli(), 2, "the following arguments are required: COMMAND")
    assert_error(run_cli("frobnicate"), 2, "invalid choice: 'frobnicate'")
    assert_error(run_cli("diff", "a"), 2, "(see 'weightstore diff --help')")
    assert run_cli("convert", "--help").returncode == 0


def test_main_returns_codes_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert main(["inspect", str(tmp_path / "nope.bpk")]) == 2
    assert capsys.readouterr().err.startswith(ERROR_PREFIX)
    assert main(["nope"]) == 2


def test_describe_builds_the_line_from_fields() -> None:
    assert describe(HeaderError("bad magic", path="m.bpk")) == ("m.bpk: bad magic", 2)
    assert describe(FileMissingError("m.bpk")) == ("m.bpk: does not exist", 2)
    assert describe(DestinationExistsError("o.bpk"))[0] == (
        "o.bpk: file exists; pass --overwrite to replace it"
    )
    missing = FileNotFoundError(2, "No such file or directory", "x.pt")
    assert describe(missing) == ("x.pt: no such file or directory", 2)
    message, code = describe(KeyError("k"))
    assert code == 3 and message.startswith("internal error: KeyError: 'k'")


def test_printable_escapes_what_would_break_a_line() -> None:
    assert printable("fc.weight") == "fc.weight"
    assert printable("a\nb\tc\x1b[0m") == "a\\nb\\tc\\x1b[0m"
    assert printable("x\ud800y\u202ez\u2028") == "x\\ud800y\\u202ez\\u2028"
    assert printable("ünïcödé 层") == "ünïcödé 层"  # printable text is left alone


def test_json_is_ascii_and_exact() -> None:
    text = dump_json({"a\ud800\n": 1})
    assert text.isascii() and "\\ud800\\n" in text
    with pytest.raises(ValueError):
        dump_json(float("nan"))  # never invalid JSON


def test_plural() -> None:
    assert [plural(n, "tensor") for n in (0, 1, 2, 1234)] == [
        "0 tensors", "1 tensor", "2 tensors", "1,234 tensors",
    ]  # fmt: skip
