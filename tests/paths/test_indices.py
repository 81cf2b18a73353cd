"""Index mapping (Burn's rules, as docs/paths.md states them), its except-variant, and
enum-variant stripping."""

from __future__ import annotations

import pytest

from weightstore.errors import InvalidOptionError, RemapCollisionError
from weightstore.paths import (
    compile_pattern,
    is_variant_segment,
    map_indices_contiguous,
    map_indices_contiguous_except,
    parse_index,
    strip_enum_variants,
)


@pytest.mark.parametrize(
    ("segment", "index"),
    [("0", 0), ("12", 12), ("007", 7), ("+3", 3), (str(2**64 - 1), 2**64 - 1)],
)
def test_parse_index_reads_what_rust_usize_reads(segment: str, index: int) -> None:
    assert parse_index(segment) == index


@pytest.mark.parametrize("segment", ["", "+", "-1", "1.5", "1a", "weight", "٣", "²", str(2**64)])
def test_parse_index_refuses_the_rest(segment: str) -> None:
    assert parse_index(segment) is None


def test_gaps_in_one_list_close() -> None:
    paths = ["fc.0.weight", "fc.0.bias", "fc.2.weight", "fc.2.bias", "fc.4.weight", "fc.4.bias"]
    assert map_indices_contiguous(paths) == {
        "fc.0.weight": "fc.0.weight",
        "fc.0.bias": "fc.0.bias",
        "fc.2.weight": "fc.1.weight",
        "fc.2.bias": "fc.1.bias",
        "fc.4.weight": "fc.2.weight",
        "fc.4.bias": "fc.2.bias",
    }


def test_each_list_is_numbered_on_its_own() -> None:
    paths = ["encoder.0.w", "encoder.2.w", "decoder.1.w", "decoder.5.w"]
    assert list(map_indices_contiguous(paths).values()) == [
        "encoder.0.w",
        "encoder.1.w",
        "decoder.0.w",
        "decoder.1.w",
    ]


def test_nested_lists_are_grouped_by_their_original_parent() -> None:
    paths = [
        "feature.layers.0.conv_block.0.weight",
        "feature.layers.0.conv_block.2.weight",
        "feature.layers.2.conv_block.0.weight",
        "feature.layers.2.conv_block.2.weight",
    ]
    assert list(map_indices_contiguous(paths).values()) == [
        "feature.layers.0.conv_block.0.weight",
        "feature.layers.0.conv_block.1.weight",
        "feature.layers.1.conv_block.0.weight",
        "feature.layers.1.conv_block.1.weight",
    ]


def test_parents_with_different_children_get_their_own_numbering() -> None:
    paths = ["b.0.c.3.w", "b.0.c.7.w", "b.4.c.5.w"]
    assert list(map_indices_contiguous(paths).values()) == ["b.0.c.0.w", "b.0.c.1.w", "b.1.c.0.w"]


def test_paths_without_indices_are_untouched() -> None:
    paths = ["conv.weight", "conv.bias", "norm.gamma"]
    assert map_indices_contiguous(paths) == {p: p for p in paths}


def test_indices_are_sorted_as_numbers_and_written_in_decimal() -> None:
    paths = ["l.10.w", "l.9.w", "l.+20.w", "l.007.w"]
    assert map_indices_contiguous(paths) == {
        "l.10.w": "l.2.w",
        "l.9.w": "l.1.w",
        "l.+20.w": "l.3.w",
        "l.007.w": "l.0.w",
    }


def test_a_leading_index_forms_a_list_with_the_empty_prefix() -> None:
    assert list(map_indices_contiguous(["1.w", "3.w", "3.b"]).values()) == ["0.w", "1.w", "1.b"]


def test_a_repeated_path_appears_once_and_empty_input_gives_nothing() -> None:
    assert map_indices_contiguous(["a.1", "a.1"]) == {"a.1": "a.0"}
    assert map_indices_contiguous([]) == {}


def test_two_spellings_of_one_index_collide() -> None:
    with pytest.raises(RemapCollisionError) as caught:
        map_indices_contiguous(["fc.0.w", "fc.00.w"])
    assert (caught.value.new, caught.value.first, caught.value.second) == (
        "fc.0.w",
        "fc.0.w",
        "fc.00.w",
    )


def test_except_keeps_matched_lists_and_closes_the_others() -> None:
    paths = ["blocks.0.w", "blocks.2.w", "head.1.w", "head.3.w"]
    assert map_indices_contiguous_except(paths, r"^blocks$") == {
        "blocks.0.w": "blocks.0.w",
        "blocks.2.w": "blocks.2.w",
        "head.1.w": "head.0.w",
        "head.3.w": "head.1.w",
    }


def test_except_sees_the_path_before_the_index_with_original_numbers() -> None:
    paths = ["blocks.1.attn.0.w", "blocks.1.attn.2.w", "blocks.3.attn.5.w", "blocks.3.attn.9.w"]
    # only the attn list under the original blocks.3 is kept; the outer list still closes
    kept = map_indices_contiguous_except(paths, r"^blocks\.3\.attn$")
    assert list(kept.values()) == [
        "blocks.0.attn.0.w",
        "blocks.0.attn.1.w",
        "blocks.1.attn.5.w",
        "blocks.1.attn.9.w",
    ]


def test_except_closes_lists_inside_a_kept_list() -> None:
    paths = ["layers.0.sub.1.w", "layers.0.sub.3.w", "layers.4.sub.2.w"]
    kept = map_indices_contiguous_except(paths, "layers$")
    assert list(kept.values()) == ["layers.0.sub.0.w", "layers.0.sub.1.w", "layers.4.sub.0.w"]


def test_except_keeps_a_kept_index_as_written() -> None:
    kept = map_indices_contiguous_except(["fc.007.w", "fc.9.w"], "^fc$")
    assert kept == {"fc.007.w": "fc.007.w", "fc.9.w": "fc.9.w"}


def test_except_accepts_a_compiled_pattern_and_refuses_a_bad_one() -> None:
    kept = map_indices_contiguous_except(["a.2.w"], compile_pattern("^a$"))
    assert kept == {"a.2.w": "a.2.w"}
    with pytest.raises(InvalidOptionError, match="does not compile"):
        map_indices_contiguous_except(["a.2.w"], "(")


def test_except_with_a_pattern_that_never_matches_equals_the_plain_mapping() -> None:
    paths = ["a.1.b.3.w", "a.1.b.5.w", "a.4.b.0.w"]
    assert map_indices_contiguous_except(paths, "^$nothing") == map_indices_contiguous(paths)


@pytest.mark.parametrize(
    ("path", "stripped"),
    [("feature.BaseConv.weight", "feature.weight"), ("a.B.c", "a.B.c"),
     ("Top.x.weight", "Top.x.weight"), ("blocks.0.DwsConv.pconv.bias", "blocks.0.pconv.bias"),
     ("a.QKV.w", "a.QKV.w"), ("a.Big", "a.Big"), ("a..w", "a..w"), ("w", "w"),
     ("a.Foo.Bar.w", "a.w")],
)  # fmt: skip
def test_strip_enum_variants_drops_inner_variant_spellings(path: str, stripped: str) -> None:
    assert strip_enum_variants(path) == stripped


def test_strip_enum_variants_first_only_drops_one() -> None:
    assert strip_enum_variants("a.Foo.Bar.w", first_only=True) == "a.Bar.w"


def test_is_variant_segment_is_burns_rule() -> None:
    assert is_variant_segment("BaseConv")
    assert not is_variant_segment("QKV")  # no lower-case letter after the first
    assert not is_variant_segment("B")  # one byte
    assert not is_variant_segment("big")
