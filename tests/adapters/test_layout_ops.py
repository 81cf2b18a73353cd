"""Fused-layout operations (`adapters._layout_ops`): each against an independent formulation
of the layout it makes (reshapes, NumPy's own joins), each undone bit for bit by the inverse
derived from its input shapes, shapes planned without data, and misfits refused by name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weightstore.adapters import (
    Chunk,
    Concat,
    Deinterleave,
    Interleave,
    LayoutOp,
    Permute,
    Pipeline,
    Split,
    Stack,
    Unstack,
)
from weightstore.errors import LayoutError


def values(shape: tuple[int, ...], seed: int, dtype: Any = np.float32) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def assert_round_trip(op: LayoutOp, arrays: list[np.ndarray[Any, Any]]) -> list[Any]:
    """`op`'s outputs have the shapes it planned, keep the dtype, and its inverse gives the
    inputs back byte for byte."""
    shapes = [a.shape for a in arrays]
    outputs = op.apply(arrays)
    assert [o.shape for o in outputs] == op.output_shapes(shapes)
    assert all(o.dtype == arrays[0].dtype for o in outputs)
    back = op.inverse(shapes).apply(outputs)
    assert len(back) == len(arrays)
    for got, want in zip(back, arrays, strict=True):
        assert got.shape == want.shape
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
    return outputs


def test_fused_qkv_is_a_concat_and_splits_back_by_the_parts_shapes() -> None:
    q, k, v = values((64, 32), 0), values((16, 32), 1), values((16, 32), 2)
    [fused] = assert_round_trip(Concat(0), [q, k, v])
    assert np.array_equal(fused, np.vstack([q, k, v]))
    assert Concat(0).inverse([q.shape, k.shape, v.shape]) == Split(0, (64, 16, 16))


def test_gate_up_on_the_last_dim_and_a_chunk_in_halves() -> None:
    gate_up = values((8, 2 * 12), 3, np.float16)
    gate, up = assert_round_trip(Chunk(-1, 2), [gate_up])
    assert np.array_equal(gate, gate_up[:, :12]) and np.array_equal(up, gate_up[:, 12:])
    assert Chunk(-1, 2).inverse([gate_up.shape]) == Concat(-1)


def test_per_expert_weights_stack_into_one_tensor_and_back() -> None:
    experts = [values((6, 4), seed) for seed in range(5)]
    [stacked] = assert_round_trip(Stack(0), experts)
    assert stacked.shape == (5, 6, 4) and np.array_equal(stacked[3], experts[3])
    unstacked = assert_round_trip(Unstack(0), [stacked])
    assert all(np.array_equal(a, b) for a, b in zip(unstacked, experts, strict=True))


def test_conv1d_is_a_transposed_linear_weight() -> None:
    conv = values((8, 24), 4)  # GPT-2 Conv1D: [in, out]
    [linear] = assert_round_trip(Permute((1, 0)), [conv])
    assert np.array_equal(linear, conv.T) and linear.flags.c_contiguous
    rank3 = values((2, 3, 4), 5)
    assert Permute((2, 0, 1)).inverse([rank3.shape]) == Permute((1, 2, 0))
    assert_round_trip(Permute((2, 0, 1)), [rank3])


def test_grouped_query_qkv_interleaves_group_by_group() -> None:
    """Two KV groups, 4 query heads and 1 KV head per group, head size 3: the fused rows are
    the group's q heads, then its k head, then its v head, group after group."""
    groups, hidden = 2, 5
    q, k, v = values((2 * 4 * 3, hidden), 6), values((2 * 3, hidden), 7), values((2 * 3, hidden), 8)
    [fused] = assert_round_trip(Interleave(0, groups), [q, k, v])
    by_group = [x.reshape(groups, -1, hidden) for x in (q, k, v)]
    assert np.array_equal(fused, np.concatenate(by_group, axis=1).reshape(-1, hidden))
    assert Interleave(0, groups).inverse([q.shape, k.shape, v.shape]) == Deinterleave(
        0, groups, (24, 6, 6)
    )


def test_a_chain_inverts_backwards() -> None:
    """Conv1D ``c_attn`` [H, 3H] to q, k, v Linear weights: transpose, then split the rows."""
    c_attn = values((4, 12), 9)
    chain = Pipeline((Permute((1, 0)), Split(0, (4, 4, 4))))
    _, k, _ = assert_round_trip(chain, [c_attn])
    assert np.array_equal(k, c_attn[:, 4:8].T)
    assert chain.inverse([c_attn.shape]) == Pipeline((Concat(0), Permute((1, 0))))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=4),
    st.integers(1, 3),
    st.integers(0, 1),
    st.integers(1, 3),
)
def test_split_concat_and_interleave_round_trip_any_sizes(
    sizes: list[int], other: int, dim: int, groups: int
) -> None:
    def shape(size: int) -> tuple[int, int]:
        return (size, other) if dim == 0 else (other, size)

    parts = [values(shape(size * groups), seed) for seed, size in enumerate(sizes)]
    for op in (Concat(dim), Interleave(dim, groups)):
        [joined] = assert_round_trip(op, parts)
        assert joined.shape == shape(sum(sizes) * groups)
    assert_round_trip(Split(dim, tuple(s * groups for s in sizes)), [joined])


@pytest.mark.parametrize(
    ("op", "shapes", "says"),
    [
        (Split(0, (64, 16, 15)), [(96, 32)], "sizes add up to 95, but dim 0 of [96, 32] is 96"),
        (Concat(0), [(4, 3), (4, 2)], "differ only in dim 0"),
        (Concat(1), [(4, 3), (4, 3, 1)], "one rank"),
        (Chunk(0, 3), [(8, 2)], "not 3 equal parts"),
        (Stack(0), [(2, 3), (3, 2)], "of one shape"),
        (Permute((0, 0)), [(2, 3)], "no order of the 2 dims"),
        (Interleave(0, 2), [(4, 3), (3, 3)], "2 equal groups"),
        (Deinterleave(0, 2, (4, 3)), [(7, 3)], "whole numbers of 2 groups"),
        (Split(2, (1,)), [(1, 1)], "dim 2 is outside a tensor of 2 dims"),
        (Unstack(0), [(2, 3), (2, 3, 4)], "takes tensors of one rank"),
        (Stack(0, 2), [(2, 3)] * 3, "cannot cut 3 tensors into 2 runs"),
    ],
)
def test_misfits_are_refused_naming_the_operation_and_shapes(
    op: LayoutOp, shapes: list[tuple[int, ...]], says: str
) -> None:
    for planned in (
        lambda: op.output_shapes(shapes),
        lambda: op.apply([np.zeros(s) for s in shapes]),
    ):
        with pytest.raises(LayoutError) as caught:
            planned()
        assert says in str(caught.value)
        assert caught.value.operation == repr(op) and str(caught.value).startswith(repr(op))
        assert caught.value.shapes == tuple(shapes)
