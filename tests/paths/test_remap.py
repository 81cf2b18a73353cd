"""KeyRemapper: chains, both replacement dialects, Burn's tested examples, collisions."""

from __future__ import annotations

import pytest

from weightstore.errors import InvalidOptionError, RemapCollisionError, WeightstoreError
from weightstore.paths import KeyRemapper


def test_a_new_remapper_is_empty_and_changes_nothing() -> None:
    identity = KeyRemapper()
    assert identity.is_empty
    assert identity.remap("encoder.layer1.gamma") == "encoder.layer1.gamma"
    assert identity.remap_names(["a", "b"]) == {"a": "a", "b": "b"}


def test_with_rule_returns_a_new_remapper() -> None:
    base = KeyRemapper()
    one = base.with_rule("a", "b")
    assert base.is_empty and not one.is_empty
    assert one.patterns == (("a", "b"),)


@pytest.mark.parametrize(
    ("pattern", "replacement", "path", "expected"),
    [  # the examples Burn's own KeyRemapper tests use, with the same results
        (r"^encoder\.", "transformer.encoder.", "encoder.layer1.w", "transformer.encoder.layer1.w"),
        (r"conv\.(.*)", "$1", "conv.weight", "weight"),
        (r"conv_blocks\.0\.(.*)", "conv1.$1", "conv_blocks.0.weight", "conv1.weight"),
        (r"(.+)\.block\.0\.(.+)", "$1.conv.$2", "layer1.block.0.weight", "layer1.conv.weight"),
        (r"(.+)\.block\.1\.(.+)", "$1.bn.$2", "layer1.block.1.bias", "layer1.bn.bias"),
        (r"layer\.([0-9])\.(.+)", "layer.blocks.$1.$2", "layer.3.w", "layer.blocks.3.w"),
    ],
)
def test_burns_examples(pattern: str, replacement: str, path: str, expected: str) -> None:
    assert KeyRemapper().with_rule(pattern, replacement).remap(path) == expected


def test_patterns_chain_in_order_each_on_the_previous_output() -> None:
    chain = KeyRemapper().with_rule(r"^encoder\.", "transformer.encoder.")
    chain = chain.with_rule(r"\.gamma$", ".weight")
    assert chain.remap("encoder.layer1.gamma") == "transformer.encoder.layer1.weight"
    # the second rule sees the first rule's output, so order changes the result
    first = KeyRemapper().with_rule("a", "b").with_rule("b", "c")
    second = KeyRemapper().with_rule("b", "c").with_rule("a", "b")
    assert first.remap("a") == "c"
    assert second.remap("a") == "b"


def test_each_rule_replaces_every_match() -> None:
    dots = KeyRemapper().with_rule(r"\.", "/")
    assert dots.remap("a.b.c") == "a/b/c"


@pytest.mark.parametrize(
    "replacement",
    [
        "$1.conv.$2",
        "${1}.conv.${2}",
        "$head.conv.$tail",
        "${head}.conv.${tail}",
        r"\1.conv.\2",
        r"\g<1>.conv.\g<2>",
        r"\g<head>.conv.\g<tail>",
    ],
)
def test_rust_and_python_replacements_give_the_same_result(replacement: str) -> None:
    pattern = r"(?<head>.+)\.block\.0\.(?P<tail>.+)"
    rule = KeyRemapper().with_rule(pattern, replacement)
    assert rule.remap("layer1.block.0.weight") == "layer1.conv.weight"


def test_a_chain_may_mix_dialects() -> None:
    chain = (
        KeyRemapper()
        .with_rule(r"^model\.(\w+)", r"\1")
        .with_rule(r"(\w+)\.(\d+)\.", "${1}_$2.")
        .with_rule(r"weight$", "$$w")
    )
    assert chain.remap("model.layers.3.weight") == "layers_3.$w"


def test_from_patterns_builds_the_same_chain() -> None:
    pairs = [(r"^a\.", "b."), (r"c$", "d")]
    built = KeyRemapper.from_patterns(pairs)
    assert built.patterns == tuple(pairs)
    assert built.remap("a.c") == "b.d"
    assert built == KeyRemapper().with_rule(*pairs[0]).with_rule(*pairs[1])


def test_add_pattern_is_burns_name_for_with_rule() -> None:
    assert KeyRemapper().add_pattern(r"^a\.", "b.") == KeyRemapper().with_rule(r"^a\.", "b.")
    with pytest.raises(InvalidOptionError):
        KeyRemapper().add_pattern("(a)", "$2")  # validated exactly as with_rule validates


@pytest.mark.parametrize(
    ("pattern", "replacement", "message"),
    [
        ("(", "x", "does not compile"),
        ("(a)", "$2", "refers to group 2"),
        ("(a)", "$1_x", "to follow group 1 with text write '${1}'"),
        ("(a)", r"\q", "unknown escape"),
    ],
)
def test_with_rule_refuses_bad_rules_at_once(pattern: str, replacement: str, message: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        KeyRemapper().with_rule(pattern, replacement)
    assert message in str(caught.value)


def test_non_string_replacement_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="replacement must be a str"):
        KeyRemapper().with_rule("a", None)  # type: ignore[arg-type]


def test_remap_names_maps_new_names_to_originals_in_input_order() -> None:
    remapper = KeyRemapper().with_rule(r"^old\.", "new.")
    names = ["old.a", "keep", "old.b", "keep"]  # a repeated name counts once
    assert remapper.remap_names(names) == {"new.a": "old.a", "keep": "keep", "new.b": "old.b"}
    assert list(remapper.remap_names(names)) == ["new.a", "keep", "new.b"]


def test_remap_names_refuses_two_names_sent_to_one() -> None:
    remapper = KeyRemapper().with_rule(r"\.gamma$", ".weight")
    with pytest.raises(RemapCollisionError) as caught:
        remapper.remap_names(["norm.weight", "x", "norm.gamma"])
    error = caught.value
    assert isinstance(error, WeightstoreError) and isinstance(error, ValueError)
    assert (error.new, error.first, error.second) == ("norm.weight", "norm.weight", "norm.gamma")
    assert error.path is None
    assert str(error) == (
        "remapping gives 'norm.weight' and 'norm.gamma' the same name 'norm.weight'; "
        "change the patterns so that every name stays unique"
    )


def test_remap_collision_names_the_file_when_given() -> None:
    remapper = KeyRemapper().with_rule(r"^(a|b)$", "c")
    with pytest.raises(RemapCollisionError) as caught:
        remapper.remap_names(["a", "b"], path="model.pt")
    error = caught.value
    assert (error.path, error.new, error.first, error.second) == ("model.pt", "c", "a", "b")


def test_str_lists_the_rules() -> None:
    remapper = KeyRemapper().with_rule(r"^a\.", "b.").with_rule("c", "${0}d")
    assert str(remapper) == r"KeyRemapper('^a\\.' -> 'b.', 'c' -> '${0}d')"
