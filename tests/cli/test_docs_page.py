"""docs/cli.md keeps up with the parser: every command, every flag and every exit code appears."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from weightstore.cli import EXIT_BROKEN_PIPE, build_parser
from weightstore.cli._errors import (
    EXIT_BAD_INPUT,
    EXIT_DIFFERENT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
)
from weightstore.cli._progress import DELAY_VARIABLE

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(subparsers.choices)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_command_and_flag_is_documented(command: str) -> None:
    assert f"weightstore {command}" in PAGE
    parser = _commands()[command]
    flags = [option for action in parser._actions for option in action.option_strings
             if option.startswith("--") and option != "--help"]  # fmt: skip
    missing = [flag for flag in flags if f"`{flag}" not in PAGE]
    assert not missing, f"docs/cli.md does not document {command} {missing}"


def test_every_exit_code_and_the_progress_variable_are_documented() -> None:
    codes = [EXIT_OK, EXIT_DIFFERENT, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED]
    for code in [*codes, EXIT_BROKEN_PIPE]:
        assert re.search(rf"^\| {code} \|", PAGE, re.MULTILINE), code
    assert f"`{DELAY_VARIABLE}`" in PAGE
    assert "`--version`" in PAGE


def test_the_help_points_at_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` ends with where every flag and exit code is explained."""
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--help"])
    assert done.value.code == 0
    assert "docs/cli.md" in capsys.readouterr().out
