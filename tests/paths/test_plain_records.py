"""The path records are plain classes (cheap to import) that keep a dataclass's contract:
immutable, equal and hashed by value, with a readable repr."""

from __future__ import annotations

import pytest

from weightstore.paths import KeyRemapper, PathFilter


def test_path_filter_is_immutable_and_compares_by_value() -> None:
    keep = PathFilter().with_regex("^a").with_full_path("b")
    with pytest.raises(AttributeError, match="immutable"):
        keep.accept_all = True
    again = PathFilter().with_regex("^a").with_full_path("b")
    assert keep == again and hash(keep) == hash(again)
    assert keep != PathFilter().with_regex("^a")
    assert keep.match_all().full_paths == ("b",)
    assert "full_paths=('b',)" in repr(keep)


def test_key_remapper_is_immutable_and_compares_by_value() -> None:
    remapper = KeyRemapper().with_rule("^a", "b")
    with pytest.raises(AttributeError, match="immutable"):
        remapper.rules = ()
    with pytest.raises(AttributeError, match="immutable"):
        remapper.rules[0].pattern = "x"
    assert remapper == KeyRemapper().with_rule("^a", "b")
    assert hash(remapper) == hash(KeyRemapper().with_rule("^a", "b"))
    assert remapper != KeyRemapper().with_rule("^a", "c")
    assert "pattern='^a'" in repr(remapper)
