"""`parse_size`: the shard sizes people write, read as the Hugging Face tools read them."""

from __future__ import annotations

import pytest

from weightstore.errors import InvalidOptionError
from weightstore.sets import parse_size


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("5GB", 5 * 10**9),
        ("100MB", 100 * 10**6),
        ("1.5GB", 1_500_000_000),
        ("1.1GB", 1_100_000_000),  # exact: the float product is 1,100,000,000.0000002
        ("500KB", 500_000),
        ("2TB", 2 * 10**12),
        ("5GiB", 5 * 2**30),
        ("64MiB", 64 * 2**20),
        ("1KiB", 1024),
        ("7gib", 7 * 2**30),  # binary units are unambiguous in any case
        ("5gB", 5 * 10**9),
        (" 500 MB ", 500 * 10**6),
        ("1000", 1000),
        ("1000B", 1000),
        (".5KB", 500),
        ("1.0005KB", 1000),  # whole bytes, rounded down
        (1, 1),
        (5 * 10**9, 5 * 10**9),
    ],
)
def test_sizes_parse(text: int | str, nbytes: int) -> None:
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["5GB", "100MB", "1.5GB", "500KB", "2TB", "0.25MB"])
def test_decimal_units_match_huggingface_hub(text: str) -> None:
    pytest.importorskip("huggingface_hub")
    from huggingface_hub.serialization._base import parse_size_to_int

    assert parse_size(text) == parse_size_to_int(text)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("5Gb", "ambiguous"),  # transformers: bits; huggingface_hub: bytes
        ("500mb", "ambiguous"),
        ("5XB", "unknown unit"),
        ("5 G B", "not a size"),
        ("GB", "not a size"),
        ("-5GB", "not a size"),
        ("1e9", "not a size"),
        ("", "not a size"),
        ("9" * 65, "characters"),
        ("0GB", "expected between 1"),
        ("0.0001B", "expected between 1"),
        (0, "expected between 1"),
        (-1, "expected between 1"),
        ("99999999TB", "expected between 1"),
        (True, "not bool"),
        (5.0, "not float"),
        (None, "not NoneType"),
    ],
)
def test_junk_is_refused_naming_the_option(value: object, says: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        parse_size(value)  # type: ignore[arg-type]
    assert caught.value.option == "max_shard_size"
    assert says in str(caught.value)


def test_the_ambiguous_error_says_what_to_write() -> None:
    with pytest.raises(InvalidOptionError, match="write 5GB"):
        parse_size("5Gb")
