"""Rust regex syntax on Python's re: pattern rewrites, refusals, replacements, replace_all."""

from __future__ import annotations

import re

import pytest

from weightstore.errors import InvalidOptionError
from weightstore.paths._regex import (
    GroupRef,
    compile_pattern,
    parse_replacement,
    replace_all,
    translate_pattern,
)


@pytest.mark.parametrize(
    ("rust", "python"),
    [
        (r"^encoder\.", r"^encoder\."),  # ordinary patterns pass through untouched
        (r"(?<name>\w+)", r"(?P<name>\w+)"),
        (r"(?P<name>\w+)", r"(?P<name>\w+)"),
        (r"(?<=a)b(?<!c)", r"(?<=a)b(?<!c)"),  # look-behind is not a named group
        (r"weight\z", r"weight\Z"),
        (r"\\z", r"\\z"),  # an escaped backslash followed by z is not \z
        (r"\x{1F4A1}", r"\U0001F4A1"),
        (r"\u{41}", r"\U00000041"),
        (r"[[:digit:]_]", r"[0-9_]"),
        (r"[^[:upper:]]", r"[^A-Z]"),
        (r"[]a]", r"[]a]"),  # a leading ] is a member, then ] closes
        (r"[(?<x]", r"[(?<x]"),  # inside a class nothing is a group
        (r"[\<]", r"[\<]"),
    ],
)
def test_translate_pattern(rust: str, python: str) -> None:
    assert translate_pattern(rust) == python


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        (r"\<fc", "x.fc", "xfc"),
        (r"fc\>", "fc.w", "fcw"),
        (r"\b{start}fc", "x.fc", "xfc"),
        (r"fc\b{end}", "fc.w", "fcw"),
        (r"\b{start-half}fc", ".fc", "afc"),
        (r"fc\b{end-half}", "fc.", "fca"),
        (r"^[[:alpha:]]+$", "Layer", "layer1"),
        (r"^[[:word:]]+$", "layer_1", "layer.1"),
    ],
)
def test_translated_patterns_match_as_rust_does(
    pattern: str, matching: str, not_matching: str
) -> None:
    regex = compile_pattern(pattern)
    assert regex.search(matching)
    assert not regex.search(not_matching)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"\p{L}", "Unicode property"),
        (r"\PL", "Unicode property"),
        (r"[a-z&&[^x]]", "set syntax"),
        (r"[a-z&&x]", "set syntax"),
        (r"[a-z--x]", "set syntax"),
        (r"[a~~b]", "set syntax"),
        (r"[a[b]]", "set syntax"),
        (r"[[:nope:]]", "nested class"),
        (r"[[:^alpha:]]", "nested class"),
    ],
)
def test_rust_syntax_that_re_would_misread_is_refused(pattern: str, why: str) -> None:
    with pytest.raises(InvalidOptionError, match=why):
        compile_pattern(pattern)


def test_python_only_features_are_accepted() -> None:
    assert compile_pattern(r"(a)\1").search("aa")
    assert compile_pattern(r"a(?=b)").search("ab")


def test_parse_replacement_reads_rust_references() -> None:
    regex = re.compile(r"(?P<head>\w+)\.(\w+)")
    assert parse_replacement("$1.${2}x", regex) == (GroupRef(1), ".", GroupRef(2), "x")
    assert parse_replacement("${head}-$head", regex) == (GroupRef("head"), "-", GroupRef("head"))
    assert parse_replacement("$0", regex) == (GroupRef(0),)
    assert parse_replacement("${002}", regex) == (GroupRef(2),)  # digits are a number


def test_parse_replacement_keeps_unreadable_dollars_literal_as_rust() -> None:
    regex = re.compile(r"(a)")
    assert parse_replacement("$$1", regex) == ("$", "1")
    assert parse_replacement("cost$", regex) == ("cost", "$")
    assert parse_replacement("$-x", regex) == ("$", "-x")
    assert parse_replacement("${1", regex) == ("$", "{1")
    assert parse_replacement("${}", regex) == ("$", "{}")


def test_parse_replacement_reads_python_references() -> None:
    regex = re.compile(r"(?P<head>a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)")
    assert parse_replacement(r"\1.\g<2>", regex) == (GroupRef(1), ".", GroupRef(2))
    assert parse_replacement(r"\g<head>", regex) == (GroupRef("head"),)
    assert parse_replacement(r"\11", regex) == (GroupRef(11),)  # two digits, as Python
    assert parse_replacement(r"a\\b", regex) == ("a", "\\", "b")


@pytest.mark.parametrize(
    ("replacement", "message"),
    [
        ("$2", "refers to group 2"),
        ("${2}", "refers to group 2"),
        (r"\2", "refers to group 2"),
        ("$name", "refers to group 'name'"),
        (r"\g<name>", "refers to group 'name'"),
        (r"\g<>", "refers to group ''"),
        ("$1_x", "write '${1}'"),  # Rust reads group "1_x"; we say how to write what was meant
        (r"\n", "unknown escape at position 0"),
        (r"\0", "unknown escape"),
        ("a\\", "unknown escape"),
    ],
)
def test_parse_replacement_refuses_bad_references(replacement: str, message: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        parse_replacement(replacement, re.compile(r"(a)"))
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("pattern", "replacement", "text", "expected"),
    [
        (r"a", "b", "banana", "bbnbnb"),  # every match, not just the first
        (r"x", "y", "abc", "abc"),
        (r"x*", "-", "abxd", "-a-b-d-"),  # Rust skips the empty match right after "x"
        (r"x*", "-", "xx", "-"),
        (r"", "-", "ab", "-a-b-"),
        (r"a|", "-", "ab", "-b-"),  # re.sub gives "--b-"
        (r"(a)|b", "[$1]", "ab", "[a][]"),  # a group outside the match gives ""
        (r"^a", "b", "aa", "ba"),  # ^ stays anchored to the start on later searches
        (r"(?<=a)b", "c", "abab", "acac"),  # look-behind sees text before the search start
    ],
)
def test_replace_all_matches_rust(pattern: str, replacement: str, text: str, expected: str) -> None:
    regex = compile_pattern(pattern)
    assert replace_all(regex, parse_replacement(replacement, regex), text) == expected
