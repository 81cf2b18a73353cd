"""PathFilter: each builder, the OR logic, the empty default, and refusals at the builder call."""

from __future__ import annotations

import pytest

from weightstore.errors import InvalidOptionError, WeightstoreError
from weightstore.paths import PathFilter


def test_a_new_filter_is_empty_and_matches_everything() -> None:
    empty = PathFilter()
    assert empty.is_empty
    assert empty.matches("any.path")
    assert empty.matches("", "Struct:Model")


def test_match_all_matches_everything_and_is_not_empty() -> None:
    everything = PathFilter().match_all()
    assert not everything.is_empty
    assert everything.accept_all
    assert everything.matches("x")
    # match_all wins over criteria that would reject
    assert PathFilter().with_full_path("a").match_all().matches("b")


def test_with_regex_searches_anywhere_in_the_path() -> None:
    layers = PathFilter().with_regex(r"layers\.\d+")
    assert not layers.is_empty
    assert layers.matches("encoder.layers.3.weight")  # unanchored, as Rust's is_match
    assert not layers.matches("encoder.head.weight")
    anchored = PathFilter().with_regex(r"^encoder\.")
    assert anchored.matches("encoder.x")
    assert not anchored.matches("decoder.encoder.x")


def test_with_regexes_adds_each_pattern_in_order() -> None:
    both = PathFilter().with_regex("a$").with_regexes(["^b", "c"])
    assert [regex.pattern for regex in both.regexes] == ["a$", "^b", "c"]
    assert both.matches("xa") and both.matches("bx") and both.matches("xcx")
    assert not both.matches("xyz")


def test_with_full_path_matches_exactly() -> None:
    exact = PathFilter().with_full_path("fc.weight")
    assert exact.full_paths == ("fc.weight",)
    assert exact.matches("fc.weight")
    assert not exact.matches("fc.weight2")
    assert not exact.matches("x.fc.weight")


def test_with_full_paths_adds_each_path() -> None:
    some = PathFilter().with_full_path("a").with_full_paths(["b", "c"])
    assert some.full_paths == ("a", "b", "c")
    assert [some.matches(p) for p in ("a", "b", "c", "d")] == [True, True, True, False]


def test_with_predicate_sees_path_and_container_path() -> None:
    seen: list[tuple[str, str]] = []

    def linear_only(path: str, container_path: str) -> bool:
        seen.append((path, container_path))
        return container_path.endswith("Struct:Linear")

    by_type = PathFilter().with_predicate(linear_only)
    assert by_type.matches("fc.weight", "Struct:Model.Struct:Linear")
    assert not by_type.matches("conv.weight", "Struct:Model.Struct:Conv2d")
    assert not by_type.matches("fc.weight")  # container path defaults to ""
    assert seen == [
        ("fc.weight", "Struct:Model.Struct:Linear"),
        ("conv.weight", "Struct:Model.Struct:Conv2d"),
        ("fc.weight", ""),
    ]


def test_criteria_combine_with_or() -> None:
    mixed = (
        PathFilter()
        .with_regex(r"^enc\.")
        .with_full_path("head.bias")
        .with_predicate(lambda path, _: path.endswith(".gamma"))
    )
    assert mixed.matches("enc.w")
    assert mixed.matches("head.bias")
    assert mixed.matches("norm.gamma")
    assert not mixed.matches("head.weight")


def test_predicates_run_only_when_cheaper_criteria_fail() -> None:
    calls: list[str] = []

    def record(path: str, container_path: str) -> bool:
        calls.append(path)
        return True

    tracked = PathFilter().with_full_path("a").with_predicate(record)
    assert tracked.matches("a")
    assert calls == []
    assert tracked.matches("b")
    assert calls == ["b"]


def test_builders_return_new_filters_and_leave_the_old_one_alone() -> None:
    base = PathFilter().with_regex("a")
    more = base.with_full_path("b").with_predicate(lambda p, c: False).match_all()
    assert base.full_paths == () and base.predicates == () and not base.accept_all
    assert len(more.regexes) == 1 and more.full_paths == ("b",) and len(more.predicates) == 1
    with pytest.raises(AttributeError):
        base.accept_all = True  # type: ignore[misc]


def test_equal_criteria_make_equal_filters() -> None:
    assert PathFilter().with_regex("a").with_full_path("b") == PathFilter().with_regex(
        "a"
    ).with_full_path("b")
    assert PathFilter().with_full_path("b") != PathFilter().with_full_path("c")


@pytest.mark.parametrize("pattern", ["(", "a)", "[z-a]", "*x", "a{2,1}"])
def test_invalid_regex_raises_at_the_builder_call(pattern: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        PathFilter().with_regex(pattern)
    assert isinstance(caught.value, WeightstoreError) and isinstance(caught.value, ValueError)
    assert repr(pattern) in str(caught.value)
    assert "does not compile" in str(caught.value)
    assert caught.value.__cause__ is not None


def test_with_regexes_adds_nothing_when_one_pattern_is_bad() -> None:
    with pytest.raises(InvalidOptionError):
        PathFilter().with_regexes(["ok", "("])


@pytest.mark.parametrize(
    ("method", "argument"),
    [("with_regexes", "abc"), ("with_full_paths", "abc"), ("with_full_paths", [1])],
)
def test_a_bare_string_or_non_string_in_a_list_builder_is_refused(
    method: str, argument: object
) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        getattr(PathFilter(), method)(argument)
    assert method in str(caught.value)


def test_non_string_regex_and_non_callable_predicate_are_refused() -> None:
    with pytest.raises(InvalidOptionError, match="must be a str"):
        PathFilter().with_regex(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="callable"):
        PathFilter().with_predicate("fc.weight")  # type: ignore[arg-type]


def test_rust_syntax_is_translated_in_filters() -> None:
    named = PathFilter().with_regex(r"^(?<block>blocks)\.\d+\z")
    assert named.matches("blocks.12")
    assert not named.matches("blocks.12.weight")


def test_str_names_the_criteria() -> None:
    assert str(PathFilter()) == "PathFilter(empty: matches every path)"
    assert str(PathFilter().with_regex("a").match_all()) == "PathFilter(all)"
    shown = PathFilter().with_regex("^a").with_full_path("b").with_predicate(lambda p, c: True)
    assert str(shown) == "PathFilter(regexes=['^a'], full_paths=['b'], predicates=1)"
