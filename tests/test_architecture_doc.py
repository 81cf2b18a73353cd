"""docs/architecture.md's layer and heavy-import tables agree with tests/test_layers.py.

The page is where a reader learns the layering; the test's tables are what is enforced. A key
missing on either side, or another rank, fails here, and so does a missing page."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layers import HEAVY_IMPORTS, LAYERS

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
_ROW = re.compile(r"^\| `([\w.]+)` \| (.+) \|$")


def _table(heading: str, columns: str) -> dict[str, str]:
    assert PAGE.is_file(), f"{PAGE} is missing"
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(columns, text.index(heading))
    rows: dict[str, str] = {}
    for line in text[start:].splitlines()[2:]:
        match = _ROW.match(line)
        if match is None:
            break
        assert match.group(1) not in rows, f"{match.group(1)} listed twice"
        rows[match.group(1)] = match.group(2)
    return rows


def test_layer_table_matches_layers() -> None:
    page = {key: int(rank) for key, rank in _table("## Layers", "| key | rank |").items()}
    assert set(page) - set(LAYERS) == set(), "keys on the page but not in LAYERS"
    assert set(LAYERS) - set(page) == set(), "keys in LAYERS but not on the page"
    assert page == LAYERS


def test_heavy_import_table_matches_heavy_imports() -> None:
    page = {
        name: set(re.findall(r"`([\w.]+)`", modules))
        for name, modules in _table("## Layers", "| package | modules |").items()
    }
    assert page == {name: set(rule.allowed_in) for name, rule in HEAVY_IMPORTS.items()}
