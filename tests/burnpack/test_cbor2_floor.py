"""The cbor2 floor pyproject.toml declares is real: `.ci/run` reruns the burnpack tests against
exactly that version (installed beside the venv's), and this test proves the rerun used it."""

from __future__ import annotations

import os
import re
from importlib.metadata import version
from pathlib import Path

import pytest
import tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def declared_floor() -> str:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    (spec,) = [d for d in dependencies if d.startswith("cbor2")]
    match = re.fullmatch(r"cbor2>=([0-9.]+)", spec)
    assert match, f"cbor2 must be declared with a >= floor, not {spec!r}"
    return match.group(1)


def test_the_floor_run_uses_the_declared_floor() -> None:
    expected = os.environ.get("WEIGHTSTORE_CBOR2_FLOOR")
    if expected is None:
        pytest.skip("not the floor run; .ci/run sets WEIGHTSTORE_CBOR2_FLOOR for it")
    assert expected == declared_floor()
    assert version("cbor2").startswith(expected)


def test_the_installed_cbor2_meets_the_floor() -> None:
    def parts(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"[0-9]+", text)[:3])

    assert parts(version("cbor2")) >= parts(declared_floor())
