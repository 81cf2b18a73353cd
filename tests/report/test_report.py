"""The load report: ApplyResult and ApplyError fields, is_success, Jaro, suggestions, prefix
changes, golden summary text."""

from __future__ import annotations

import pytest

from weightstore.paths import KeyRemapper, strip_enum_variants
from weightstore.report import (
    MAX_NAME_LEN,
    SUGGESTION_THRESHOLD,
    ApplyError,
    ApplyResult,
    PrefixChange,
    find_prefix_change,
    jaro_similarity,
)

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


@pytest.mark.parametrize(
    "result",
    [
        ApplyResult(missing=[("a", "dict")], unused=["module.a"]),  # every name wrong
        ApplyResult(skipped=["a"]),  # the filter kept nothing
        ApplyResult(held_back=["a"], missing=[("b", "dict")], refused="missing"),
    ],
    ids=["every-name-wrong", "all-filtered", "refused"],
)
def test_a_load_that_wrote_nothing_is_no_success(result: ApplyResult) -> None:
    # Burn calls the first a success (no errors); a load that loaded nothing is none.
    assert result.loaded_nothing() and not result.is_success()


def test_a_model_without_tensors_loads_nothing_successfully() -> None:
    result = ApplyResult(unused=["a"])
    assert not result.loaded_nothing() and result.is_success()


def test_apply_error_constructors_fill_the_fields() -> None:
    shape = ApplyError.shape_mismatch("fc.weight", (2, 3), [3, 2])
    assert (shape.kind, shape.path, shape.expected, shape.found) == (
        "shape_mismatch",
        "fc.weight",
        "(2, 3)",
        "(3, 2)",
    )
    assert shape.message.endswith(".with_from_adapter(BurnToPyTorchAdapter())")
    dtype = ApplyError.dtype_mismatch("fc.bias", "F16", "F32")
    assert (dtype.kind, dtype.expected, dtype.found) == ("dtype_mismatch", "F16", "F32")
    load = ApplyError.load_error("fc.bias", "truncated")
    assert (load.kind, load.expected, load.found, load.message) == (
        "load_error",
        "",
        "",
        "truncated",
    )


SIZES_ADVICE = (
    "the model and the source were built with different sizes; build the model as the source's "
    "was, or leave this tensor out with a filter"
)


def test_apply_error_messages_are_built_from_fields() -> None:
    assert str(ApplyError.shape_mismatch("fc.weight", (2, 3), (3,))) == (
        f"tensor 'fc.weight': shape is (3,), expected (2, 3); {SIZES_ADVICE}"
    )
    assert str(ApplyError.shape_mismatch("s", (), (1,))) == (
        f"tensor 's': shape is (1,), expected (); {SIZES_ADVICE}"
    )
    assert str(ApplyError.dtype_mismatch("b", "F16", "F32")) == (
        "tensor 'b': dtype is F32, expected F16; "
        "converting would lose information; load with .with_from_adapter(HalfPrecisionAdapter())"
    )
    assert str(ApplyError.dtype_mismatch("b", "I32", "F32", "floats do not fit")) == (
        "tensor 'b': dtype is F32, expected I32; floats do not fit"
    )
    assert str(ApplyError.load_error("b", "read failed")) == (
        "tensor 'b': data failed to load: read failed"
    )


def test_every_apply_error_has_a_message() -> None:
    errors = [
        ApplyError.shape_mismatch("a", (2, 3), (4,)),
        ApplyError.shape_mismatch("a", (2, 3), (3, 2)),
        ApplyError.dtype_mismatch("a", "I32", "F32"),
        ApplyError.load_error("a", ""),
        ApplyError("shape_mismatch", "a", "(2,)", "(3,)"),  # built directly, no message
        ApplyError("dtype_mismatch", "a", "F16", "F32"),
        ApplyError("load_error", "a"),
    ]
    assert all(error.message for error in errors)
    assert ApplyError.load_error("a", "").message == "no cause was given"
    assert ApplyError("dtype_mismatch", "a", "F16", "F32") == ApplyError.dtype_mismatch(
        "a", "F16", "F32"
    )


@pytest.mark.parametrize(
    ("expected", "found", "adapter"),
    [
        ("F16", "F32", "HalfPrecisionAdapter()"),  # it converts to each model tensor's dtype
        ("BF16", "F32", 'FloatCastAdapter.to("BF16")'),
        ("F32", "F64", 'FloatCastAdapter.to("F32")'),
        ("BF16", "F16", 'FloatCastAdapter.to("BF16")'),
        ("I32", "F32", None),  # no built-in adapter casts a float to an int
        ("I16", "I32", None),
        ("F16", "NOPE", None),  # not a dtype name: no advice, no crash
    ],
)
def test_dtype_mismatch_names_the_adapter_that_fixes_it(
    expected: str, found: str, adapter: str | None
) -> None:
    error = ApplyError.dtype_mismatch("w", expected, found)
    assert error.fix_adapter == adapter
    if adapter is None:
        assert error.message.startswith(f"no built-in adapter converts {found} to {expected}")
    else:
        assert error.message.endswith(f"load with .with_from_adapter({adapter})")


def test_shape_mismatch_advice_names_the_adapter_for_a_transposed_weight() -> None:
    transposed = ApplyError.shape_mismatch("fc.weight", (4, 8), (8, 4))
    assert transposed.fix_adapter == "BurnToPyTorchAdapter()"
    assert transposed.message.startswith("transposed, as Burn stores Linear weights")
    for expected, found in [((4, 4), (4, 4)), ((4, 8), (4, 9)), ((2, 3, 4), (4, 3, 2))]:
        assert ApplyError.shape_mismatch("w", expected, found).fix_adapter is None
    assert ApplyError.load_error("w", "x").fix_adapter is None


def test_result_fix_adapter_only_when_one_adapter_fixes_every_error() -> None:
    half = ApplyError.dtype_mismatch("a", "F16", "F32")
    assert ApplyResult(errors=[half, half]).fix_adapter() == "HalfPrecisionAdapter()"
    cast = ApplyError.dtype_mismatch("b", "BF16", "F32")
    assert ApplyResult(errors=[half, cast]).fix_adapter() is None
    assert ApplyResult(errors=[half, ApplyError.load_error("c", "x")]).fix_adapter() is None
    assert ApplyResult().fix_adapter() is None


def test_apply_error_is_a_frozen_record() -> None:
    error = ApplyError.load_error("a", "x")
    with pytest.raises(AttributeError, match="cannot assign to field 'path'"):
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
│ ✓ Successfully applied:       2 tensors
│ ⊘ Skipped (filtered):         1 tensor
│ ✗ Missing in source:          0 tensors
│ ? In source, unused by model: 0 tensors
│ ! Errors:                     0 errors
│
└───────────────────────────────────────────────────"""


def test_summary_of_a_clean_load() -> None:
    result = ApplyResult(applied=["a", "b"], skipped=["c"])
    assert str(result) == SUCCESS_SUMMARY


FULL_SUMMARY = """\
┌─ Tensor Loading Summary ─────────────────────────
│
│ ✓ Successfully applied:       1 tensor
│ ⊘ Skipped (filtered):         0 tensors
│ ✗ Missing in source:          3 tensors
│ ? In source, unused by model: 3 tensors
│ ! Errors:                     2 errors
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
│  ⚠️  tensor 'fc.weight': shape is (3, 2), expected (2, 3); transposed, as Burn stores Linear \
weights; load with .with_from_adapter(BurnToPyTorchAdapter())
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
│ ✓ Successfully applied:       0 tensors
│ ⊘ Skipped (filtered):         0 tensors
│ ✗ Missing in source:          12 tensors
│ ? In source, unused by model: 11 tensors
│ ! Errors:                     13 errors
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


# -- counts, source, refusal -------------------------------------------------------------------

REFUSED_SUMMARY = """\
┌─ Tensor Loading Summary ─────────────────────────
│
│ Source: model.safetensors
│ ✓ Successfully applied:       0 tensors
│ ⊘ Skipped (filtered):         0 tensors
│ ✗ Missing in source:          1 tensor
│ ? In source, unused by model: 0 tensors
│ ! Errors:                     1 error
│ ⏸ Held back:                  2 tensors (the load was refused before writing; the model is unchanged)
│
├─ Missing Tensors (requested by model but not found in source)
│
│  First 10 missing tensors:
│    • head.bias
│
├─ Errors
│
│  ⚠️  tensor 'x': data failed to load: gone
│
└───────────────────────────────────────────────────"""  # noqa: E501


def test_summary_counts_in_the_singular_and_shows_source_and_refusal() -> None:
    result = ApplyResult(
        missing=[("head.bias", "Net.Linear")],
        errors=[ApplyError.load_error("x", "gone")],
        held_back=["a", "b"],
        refused="errors",
        source="model.safetensors",
    )
    assert str(result) == REFUSED_SUMMARY


def test_summary_cuts_names_from_a_file() -> None:
    long_name = "x" * 100_000
    text = str(ApplyResult(applied=["a"], unused=[long_name]))
    assert f"│    • {'x' * (MAX_NAME_LEN - 1)}…\n" in text
    assert len(text) < 2_000


# -- names that differ by a prefix ---------------------------------------------------------------

MODEL = ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]


@pytest.mark.parametrize(
    ("source", "change", "fix"),
    [
        ([f"module.{p}" for p in MODEL], ("module.", ""),
         '.with_key_remapping(r"^module\\.", "")'),
        ([f"_orig_mod.module.{p}" for p in MODEL], ("_orig_mod.module.", ""),
         '.with_key_remapping(r"^_orig_mod\\.module\\.", "")'),
        (list(MODEL), ("", "model."),
         '.with_key_remapping("^(.*)$", "model.$1")'),
        ([f"module.{p}" for p in MODEL], ("module.", "model."),
         '.with_key_remapping(r"^module\\.", "model.")'),
    ],
    ids=["added", "added-two-segments", "removed", "replaced"],
)  # fmt: skip
def test_prefix_changes_are_found_and_their_remapping_fixes_them(
    source: list[str], change: tuple[str, str], fix: str
) -> None:
    model = [f"{change[1]}{p}" for p in MODEL]
    found = find_prefix_change(model, source)
    assert found == PrefixChange(change[0], change[1], 4, 4)
    assert found.fix() == fix
    pattern, replacement = found.remapping()
    renamed = KeyRemapper().add_pattern(pattern, replacement)
    assert sorted(renamed.remap(name) for name in source) == sorted(model)


def test_prefix_change_prefers_the_shortest_whole_prefix() -> None:
    # 'module.' and 'module.conv.' both explain conv.*; the whole-model one explains more.
    found = find_prefix_change(MODEL, [f"module.{p}" for p in MODEL])
    assert found is not None and found.source_prefix == "module."


def test_top_level_key_fix_only_for_one_segment_added() -> None:
    change = PrefixChange("state_dict.", "", 4, 4)
    assert change.top_level_key == "state_dict"
    assert change.fix(top_level_key=True) == '.with_top_level_key("state_dict")'
    assert change.fix() == '.with_key_remapping(r"^state_dict\\.", "")'
    assert PrefixChange("a.b.", "", 1, 1).top_level_key is None
    assert PrefixChange("module.", "model.", 2, 2).top_level_key is None
    assert (
        PrefixChange("", "model.", 1, 1).fix(top_level_key=True).startswith(".with_key_remapping(")
    )


@pytest.mark.parametrize(
    ("missing", "unused", "applied"),
    [
        (MODEL, [], []),
        ([], ["module.a"], []),
        (MODEL, ["module.conv.weight"], []),  # explains 1 of 4: not more than half
        (["bias"], ["fc.bias"], ["fc.weight"]),  # removing 'fc.' would break a loaded tensor
        (["fc.weight"], ["weight"], ["conv.weight"]),  # adding to every name breaks it too
        (["fc2.bias"], ["fc3.bias"], []),  # one first segment differing: two layers, likely
        (["w"], ["p" * 200 + ".w"], []),  # no wrapper has such a prefix
    ],
)
def test_no_prefix_change_when_it_would_mislead(
    missing: list[str], unused: list[str], applied: list[str]
) -> None:
    assert find_prefix_change(missing, unused, applied) is None


def test_prefix_change_escapes_what_a_regex_or_a_replacement_would_read() -> None:
    change = PrefixChange("a+b.", "$x\\.", 2, 2)
    pattern, replacement = change.remapping()
    assert (pattern, replacement) == ("^a\\+b\\.", "$$x\\\\.")
    renamed = KeyRemapper().add_pattern(pattern, replacement)
    assert renamed.remap("a+b.w") == "$x\\.w"


def test_prefix_change_describes_itself() -> None:
    assert str(PrefixChange("module.", "", 9, 9)) == (
        "9 of 9 missing tensors are in the source as 'module.' + their name"
    )
    assert str(PrefixChange("", "model.", 1, 1)) == (
        "1 of 1 missing tensor is in the source without its 'model.' prefix"
    )
    assert str(PrefixChange("module.", "model.", 3, 4)) == (
        "3 of 4 missing tensors are in the source with 'module.' in place of 'model.'"
    )


PREFIX_SECTION = """\
│
├─ Names Differ by a Prefix
│
│  ⚠️  2 of 2 missing tensors are in the source as 'state_dict.' + their name
│      💡 Fix: add {fix} to the store
│
├─ Missing Tensors (requested by model but not found in source)"""


@pytest.mark.parametrize(
    ("top_level_key", "fix"),
    [
        (None, '.with_key_remapping(r"^state_dict\\.", "")'),
        ("state_dict", '.with_top_level_key("state_dict")'),  # the store checked the key
        ("model", '.with_key_remapping(r"^state_dict\\.", "")'),
    ],
)
def test_summary_names_the_prefix_fix(top_level_key: str | None, fix: str) -> None:
    result = ApplyResult(
        missing=[("fc.bias", "Net.Linear"), ("fc.weight", "Net.Linear")],
        unused=["state_dict.fc.bias", "state_dict.fc.weight"],
        top_level_key=top_level_key,
    )
    assert PREFIX_SECTION.format(fix=fix) in str(result)


def test_missing_paths_suggest_their_name_under_the_prefix() -> None:
    # Jaro finds no 'module.fc.bias' for 'fc.bias' (0.63); the prefix change does, exactly.
    result = ApplyResult(
        missing=[("fc.bias", ""), ("fc.weight", "")], unused=["module.fc.bias", "module.fc.weight"]
    )
    assert result.suggestions("fc.bias") == []
    text = str(result)
    assert "│    • fc.bias\n│        Did you mean: 'module.fc.bias'?\n" in text
    assert "│    • fc.weight\n│        Did you mean: 'module.fc.weight'?\n" in text
    assert str(PrefixChange("module.", "", 100_000, 100_000)).startswith("100,000 of 100,000")


def test_result_compares_by_fields_and_is_unhashable() -> None:
    one = ApplyResult(applied=["a"], errors=[ApplyError.load_error("b", "x")], source="f")
    assert one == ApplyResult(applied=["a"], errors=[ApplyError.load_error("b", "x")], source="f")
    assert one != ApplyResult(applied=["a"], source="f")
    assert ApplyError.load_error("b", "x") != ApplyError.load_error("b", "y")
    assert hash(ApplyError.load_error("b", "x")) == hash(ApplyError("load_error", "b", message="x"))
    with pytest.raises(TypeError):
        hash(one)
    assert repr(ApplyResult(unused=["u"])).startswith("ApplyResult(applied=[], skipped=[]")
    assert not hasattr(one, "__dict__")
