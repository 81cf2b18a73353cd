"""ApplyResult and ApplyError: fields, is_success, Jaro, suggestions, golden summary text."""

from __future__ import annotations

import dataclasses

import pytest

from weightstore.apply_result import (
    SUGGESTION_THRESHOLD,
    ApplyError,
    ApplyResult,
    jaro_similarity,
)
from weightstore.paths import strip_enum_variants

# Values Rust's textdistance 1.1.1 `nstr::jaro` returns for these pairs, which Burn's
# suggestions use; the textbook Jaro differs on some of them.
JARO_GOLDENS = [
    ("abc", "acbd", 0.8055555555555555),
    ("test", "tset", 0.9166666666666666),
    ("dixon", "dicksonx", 0.7666666666666666),
    ("dwayne", "duane", 0.8222222222222223),
    ("a", "ab", 0.8333333333333334),
    ("norm.gamma", "norm.weight", 0.7151515151515152),
    ("fc1.gamma", "fc1.weight", 0.6851851851851851),
]


@pytest.mark.parametrize(("first", "second", "similarity"), JARO_GOLDENS)
def test_jaro_matches_textdistance(first: str, second: str, similarity: float) -> None:
    assert jaro_similarity(first, second) == similarity  # exact: the same float operations


@pytest.mark.parametrize(
    ("first", "second", "similarity"),
    [
        ("", "", 1.0),
        ("", "a", 0.0),
        ("a", "", 0.0),
        ("a", "a", 1.0),
        ("a", "b", 0.0),
        ("abc", "abc", 1.0),
        ("abc", "xyz", 0.0),
        ("ab", "ba", 0.0),
    ],
)
def test_jaro_edge_cases(first: str, second: str, similarity: float) -> None:
    assert jaro_similarity(first, second) == similarity


def test_jaro_counts_characters_not_bytes() -> None:
    assert jaro_similarity("é", "é") == 1.0
    assert jaro_similarity("aé", "ae") == jaro_similarity("ax", "ae")


def test_an_empty_result_is_a_success_with_empty_fields() -> None:
    result = ApplyResult()
    assert result.is_success()
    assert (result.applied, result.skipped, result.missing, result.unused, result.errors) == (
        [],
        [],
        [],
        [],
        [],
    )
    assert ApplyResult().applied is not result.applied  # each result has its own lists


def test_missing_and_unused_do_not_fail_is_success_but_errors_do() -> None:
    result = ApplyResult(applied=["a"], missing=[("b", "Struct:M")], unused=["c"], skipped=["d"])
    assert result.is_success()
    result.errors.append(ApplyError.load_error("a", "disk on fire"))
    assert not result.is_success()


def test_apply_error_constructors_fill_the_fields() -> None:
    shape = ApplyError.shape_mismatch("fc.weight", (2, 3), [3, 2])
    assert (shape.kind, shape.path, shape.expected, shape.found, shape.message) == (
        "shape_mismatch",
        "fc.weight",
        "(2, 3)",
        "(3, 2)",
        "",
    )
    dtype = ApplyError.dtype_mismatch("fc.bias", "F16", "F32")
    assert (dtype.kind, dtype.expected, dtype.found) == ("dtype_mismatch", "F16", "F32")
    load = ApplyError.load_error("fc.bias", "truncated")
    assert (load.kind, load.expected, load.found, load.message) == (
        "load_error",
        "",
        "",
        "truncated",
    )


def test_apply_error_messages_are_built_from_fields() -> None:
    assert str(ApplyError.shape_mismatch("fc.weight", (2, 3), (3,))) == (
        "tensor 'fc.weight': shape is (3,), expected (2, 3)"
    )
    assert str(ApplyError.shape_mismatch("s", (), (1,))) == "tensor 's': shape is (1,), expected ()"
    assert str(ApplyError.dtype_mismatch("b", "F16", "F32")) == (
        "tensor 'b': dtype is F32, expected F16; "
        "converting would lose information; cast explicitly with an adapter"
    )
    assert str(ApplyError.dtype_mismatch("b", "I32", "F32", "floats do not fit")) == (
        "tensor 'b': dtype is F32, expected I32; floats do not fit"
    )
    assert str(ApplyError.load_error("b", "read failed")) == (
        "tensor 'b': data failed to load: read failed"
    )


def test_apply_error_is_a_frozen_record() -> None:
    error = ApplyError.load_error("a", "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        error.path = "b"  # type: ignore[misc]
    assert error == ApplyError("load_error", "a", message="x")
    assert not hasattr(error, "__dict__")


def test_suggestions_prefer_the_path_without_an_enum_variant() -> None:
    result = ApplyResult(unused=["feature.BaseConv.bias", "feature.weight"])
    assert result.suggestions("feature.BaseConv.weight") == ["feature.weight"]
    # the stripped path is the only answer, even when more are asked for
    assert result.suggestions("feature.BaseConv.weight", limit=5) == ["feature.weight"]


@pytest.mark.parametrize(
    ("path", "stripped"),
    [
        ("feature.BaseConv.weight", "feature.weight"),
        ("a.Big.Wide.w", "a.Wide.w"),  # only the first candidate is removed
        ("a.Ölz.w", "a.w"),  # Unicode case, as Rust's char methods
        ("a.QKV.w", None),  # no lower-case letter after the first
        ("a.B.w", None),  # one byte long
        ("a.big.w", None),  # starts lower-case
        ("Big.a.w", None),  # the first segment is never a variant
        ("a.Big", None),  # nor the last
        ("a..w", None),
    ],
)
def test_variant_guess(path: str, stripped: str | None) -> None:
    assert strip_enum_variants(path, first_only=True) == (path if stripped is None else stripped)


def test_suggestions_fall_back_to_jaro_above_the_threshold() -> None:
    assert SUGGESTION_THRESHOLD == 0.7
    result = ApplyResult(unused=["fc1.weight", "norm.weight"])
    assert result.suggestions("norm.gamma") == ["norm.weight"]  # 0.715
    assert result.suggestions("fc1.gamma") == []  # 0.685 is below 0.7


def test_suggestions_are_sorted_by_similarity_and_ties_keep_unused_order() -> None:
    result = ApplyResult(unused=["layer.bias", "layer.weighs", "layer.weight"])
    assert result.suggestions("layer.weight", limit=3) == [
        "layer.weight",
        "layer.weighs",
        "layer.bias",
    ]
    tied = ApplyResult(unused=["abcx", "abcy"])
    assert tied.suggestions("abcz", limit=2) == ["abcx", "abcy"]
    assert tied.suggestions("abcz") == ["abcx"]


SUCCESS_SUMMARY = """\
┌─ Tensor Loading Summary ─────────────────────────
│
│ ✓ Successfully applied: 2 tensors
│ ⊘ Skipped (filtered):  1 tensors
│ ✗ Missing in source:    0 tensors
│ ? Unused in target:     0 tensors
│ ! Errors:               0 errors
│
└───────────────────────────────────────────────────"""


def test_summary_of_a_clean_load() -> None:
    result = ApplyResult(applied=["a", "b"], skipped=["c"])
    assert str(result) == SUCCESS_SUMMARY


FULL_SUMMARY = """\
┌─ Tensor Loading Summary ─────────────────────────
│
│ ✓ Successfully applied: 1 tensors
│ ⊘ Skipped (filtered):  0 tensors
│ ✗ Missing in source:    3 tensors
│ ? Unused in target:     3 tensors
│ ! Errors:               2 errors
│
├─ Missing Tensors (requested by model but not found in source)
│
│  ⚠️  1 paths contain enum variants (detected from container stack)
│      Burn includes enum variant names in paths, but PyTorch doesn't.
│      Example: Burn has 'field.BaseConv.weight', PyTorch has 'field.weight'
│
│      💡 Solution 1: Enable skip_enum_variants flag (simplest):
│
│         store = PytorchStore.from_file("model.pth").skip_enum_variants(True)  # ← add this
│
│      💡 Solution 2: Remap enum keys in source (most precise):
│
│         store = SafetensorsStore.from_file("model.safetensors").with_key_remapping(
│             r"field\\.(\\w+)", r"field.BaseConv.\\1"
│         )
│
│  First 10 missing tensors:
│    • feature.BaseConv.weight
│        Did you mean: 'feature.weight'?
│    • head.bias
│    • norm.gamma
│        Did you mean: 'norm.weight'?
│
├─ Unused Tensors (in source but not used by model)
│
│  First 10 unused tensors:
│    • feature.weight
│    • norm.weight
│    • zzz
│
├─ Errors
│
│  ⚠️  tensor 'fc.weight': shape is (3, 2), expected (2, 3)
│  ⚠️  tensor 'fc.bias': data failed to load: file truncated
│
└───────────────────────────────────────────────────"""


def test_summary_with_every_section() -> None:
    result = ApplyResult(
        applied=["embed.weight"],
        missing=[
            ("feature.BaseConv.weight", "Struct:Model.Enum:ConvKind.Struct:BaseConv"),
            ("head.bias", "Struct:Model.Struct:Linear"),
            ("norm.gamma", "Struct:Model.Struct:LayerNorm"),
        ],
        unused=["feature.weight", "norm.weight", "zzz"],
        errors=[
            ApplyError.shape_mismatch("fc.weight", (2, 3), (3, 2)),
            ApplyError.load_error("fc.bias", "file truncated"),
        ],
    )
    assert str(result) == FULL_SUMMARY


def _many(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(count)]


LONG_SUMMARY = (
    """\
┌─ Tensor Loading Summary ─────────────────────────
│
│ ✓ Successfully applied: 0 tensors
│ ⊘ Skipped (filtered):  0 tensors
│ ✗ Missing in source:    12 tensors
│ ? Unused in target:     11 tensors
│ ! Errors:               13 errors
│
├─ Missing Tensors (requested by model but not found in source)
│
│  First 10 missing tensors:
"""
    + "".join(f"│    • m{i:02d}\n" for i in range(10))
    + """\
│    ... and 2 more
│
├─ Unused Tensors (in source but not used by model)
│
│  First 10 unused tensors:
"""
    + "".join(f"│    • src.unused.{i:02d}\n" for i in range(10))
    + """\
│    ... and 1 more
│
├─ Errors
│
"""
    + "".join(f"│  ⚠️  tensor 'e{i:02d}': data failed to load: x\n" for i in range(10))
    + """\
│    ... and 3 more
│
└───────────────────────────────────────────────────"""
)


def test_long_sections_list_ten_and_count_the_rest() -> None:
    result = ApplyResult(
        missing=[(path, "") for path in _many("m", 12)],
        unused=_many("src.unused.", 11),
        errors=[ApplyError.load_error(path, "x") for path in _many("e", 13)],
    )
    assert str(result) == LONG_SUMMARY  # no suggestions: "m00" vs "src.unused.00" scores 0


def test_summary_box_characters_are_burns_code_points() -> None:
    text = str(ApplyResult(missing=[("a.B", "Enum:E")], errors=[ApplyError.load_error("a", "")]))
    for char in "┌│├└─✓⊘✗•💡":
        assert char in text
    assert "\u26a0\ufe0f" in text  # the warning sign with its emoji selector
    assert text.splitlines()[0] == "┌─ Tensor Loading Summary " + "─" * 25
    assert text.splitlines()[-1] == "└" + "─" * 51
    assert not text.endswith("\n")
