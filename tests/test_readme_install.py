"""The README's front door: a light install that runs the demo with the package's own
dependencies, a development install with every extra CI uses, and an `all` extra that names
every optional part."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the checks are of text files

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = PROJECT["optional-dependencies"]


def _sh_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", README, re.MULTILINE | re.DOTALL)


def _extras_of(spec: str) -> set[str]:
    match = re.search(r"\[([\w,]+)\]", spec)
    return set(match.group(1).split(",")) if match else set()


def test_the_all_extra_names_every_optional_part_but_dev() -> None:
    [spec] = EXTRAS["all"]
    assert spec.startswith(f"{PROJECT['name']}[")
    assert _extras_of(spec) == set(EXTRAS) - {"all", "dev"}


def test_the_first_install_is_the_package_alone_then_the_demo() -> None:
    first = _sh_blocks()[0]
    assert "pip install -e . " in first and "weightstore demo" in first
    assert ". .venv/bin/activate" in first  # the CLI lines below run as written


def test_the_development_install_covers_what_ci_installs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    [ci_spec] = re.findall(r"-e '(\.\[[\w,]+\])'", ci)
    dev = next(block for block in _sh_blocks() if "python -m pytest" in block)
    [readme_spec] = re.findall(r"-e '(\.\[[\w,]+\])'", dev)
    wanted = set()
    for extra in _extras_of(readme_spec):
        wanted |= _extras_of(EXTRAS["all"][0]) if extra == "all" else {extra}
    assert wanted >= _extras_of(ci_spec)
    assert "-c constraints.txt" in dev
    assert "--index-url https://download.pytorch.org/whl/cpu" in dev
