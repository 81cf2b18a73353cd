"""Planning range requests (`plan_blocks`) and the read settings, without a store."""

from __future__ import annotations

import pytest

from weightstore.errors import InvalidOptionError
from weightstore.io._fs import READ_OPTIONS_KEY, split_options
from weightstore.io._remote_source import ReadTuning, plan_blocks

MiB = 2**20


def _spans(blocks: list) -> list[tuple[int, int]]:
    return [(block.start, block.end) for block in blocks]


def _check_cover(ranges: list[tuple[int, int]], blocks: list) -> None:
    """Every byte of every range is delivered once, from a block that holds it."""
    delivered: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(ranges))}
    for block in blocks:
        for piece, piece_offset, block_offset, size in block.parts:
            assert block_offset >= 0 and block.start + block_offset + size <= block.end
            assert block.start + block_offset == ranges[piece][0] + piece_offset
            delivered[piece].append((piece_offset, size))
    for piece, (_, size) in enumerate(ranges):
        parts = sorted(delivered[piece])
        position = 0
        for offset, length in parts:
            assert offset == position
            position += length
        assert position == size


def test_neighbours_merge_when_the_gap_is_within_one_percent() -> None:
    ranges = [(1000, 100_000), (101_000 + 500, 100_000)]  # a 500-byte gap, 0.25 % of 200,000
    blocks = plan_blocks(ranges, 16 * MiB)
    assert _spans(blocks) == [(1000, 201_500)]
    _check_cover(ranges, blocks)


def test_a_gap_over_the_budget_stays_a_gap() -> None:
    ranges = [(0, 100_000), (100_000 + 3000, 100_000)]  # 3,000 > 1 % of 200,000
    blocks = plan_blocks(ranges, 16 * MiB)
    assert _spans(blocks) == [(0, 100_000), (103_000, 203_000)]
    assert sum(b.end - b.start for b in blocks) == 200_000


def test_the_cheapest_gaps_take_the_budget_first() -> None:
    # needed 300,000: a budget of 3,000 covers the gaps of 1,000 and 2,000, not the 2,500
    ranges = [(0, 100_000), (101_000, 100_000), (203_500, 50_000), (255_500, 50_000)]
    blocks = plan_blocks(ranges, 16 * MiB)
    assert _spans(blocks) == [(0, 201_000), (203_500, 305_500)]
    fetched = sum(b.end - b.start for b in blocks)
    assert fetched <= 1.01 * sum(size for _, size in ranges)
    _check_cover(ranges, blocks)


def test_runs_are_cut_into_blocks_of_at_most_block_size() -> None:
    ranges = [(10, 10 * MiB)]
    blocks = plan_blocks(ranges, 4 * MiB)
    assert _spans(blocks) == [(10, 10 + 4 * MiB), (10 + 4 * MiB, 10 + 8 * MiB),
                              (10 + 8 * MiB, 10 + 10 * MiB)]  # fmt: skip
    _check_cover(ranges, blocks)


def test_small_ranges_share_a_block_and_a_range_may_span_blocks() -> None:
    ranges = [(0, 300), (300, 700), (1000, 2500)]  # touching: one run of 3,500 bytes
    blocks = plan_blocks(ranges, 1024)
    assert _spans(blocks) == [(0, 1024), (1024, 2048), (2048, 3072), (3072, 3500)]
    assert [part[0] for part in blocks[0].parts] == [0, 1, 2]
    _check_cover(ranges, blocks)


def test_overlapping_and_unsorted_ranges_are_each_delivered_whole() -> None:
    ranges = [(500, 1000), (0, 800), (1400, 10), (0, 0)]
    blocks = plan_blocks(ranges, 1 << 20)
    assert _spans(blocks) == [(0, 1500)]
    _check_cover([(500, 1000), (0, 800), (1400, 10)], plan_blocks(ranges[:3], 1 << 20))


def test_no_ranges_need_no_request() -> None:
    assert plan_blocks([], MiB) == []
    assert plan_blocks([(5, 0)], MiB) == []


def test_read_settings_come_from_their_own_key_and_never_reach_fsspec() -> None:
    options = {"anon": True, READ_OPTIONS_KEY: {"block_size": 1024, "max_concurrency": 3}}
    fs_options, ours = split_options(options)
    assert fs_options == {"anon": True}
    tuning = ReadTuning.from_options(ours)
    assert (tuning.block_size, tuning.max_concurrency, tuning.window_size) == (1024, 3, 3072)
    assert tuning.head_size == 64 * 1024 and tuning.gap_ratio == 0.01


@pytest.mark.parametrize(
    ("settings", "option"),
    [
        ({"block_size": 0}, "block_size"),
        ({"max_concurrency": 2.5}, "max_concurrency"),
        ({"gap_ratio": -1}, "gap_ratio"),
        ({"blocksize": 1}, "blocksize"),
    ],
)
def test_a_bad_read_setting_is_refused_naming_it(settings: dict, option: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        ReadTuning.from_options(settings)
    assert caught.value.option == option


def test_read_settings_must_be_a_mapping() -> None:
    with pytest.raises(InvalidOptionError):
        split_options({READ_OPTIONS_KEY: 5})
