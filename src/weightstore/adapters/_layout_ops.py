"""The operations of fused-layout rules: small declarative values that turn a list of tensors
into another, each with its inverse derived from the shapes it was given.

A fused ``qkv_proj`` is ``Concat(0)`` of ``q``, ``k`` and ``v``, and its inverse is a
``Split(0, sizes)`` whose sizes come from the parts' shapes; a stacked expert tensor is
``Stack(0)`` of the per-expert ones; GPT-2's ``Conv1D`` is a ``Permute((1, 0))`` of a Linear
weight. Each operation first says what shapes it makes from the shapes it is given
(`output_shapes`, no data read, so a plan can be checked before a load), then makes them
(`apply`). Every output is a new contiguous array or a view of an input; nothing is cast.

`Permute` acts on each tensor of the list; the others take the whole list. `Pipeline` runs
operations in order, and its inverse runs their inverses backwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from weightstore.base._record import ValueRecord
from weightstore.errors import LayoutError

__all__ = [
    "Chunk",
    "Concat",
    "Deinterleave",
    "Interleave",
    "LayoutOp",
    "Permute",
    "Pipeline",
    "Split",
    "Stack",
    "Unstack",
]

Shape = tuple[int, ...]
Arrays = list["np.ndarray[Any, Any]"]


class LayoutOp(ValueRecord):
    """One step of a layout rule (see the module docstring)."""

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        """The shapes `apply` makes from tensors of `shapes`.

        Raises:
            LayoutError: tensors of these shapes do not fit the operation.
        """
        raise NotImplementedError

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        """The operation's outputs from `arrays` (checked as `output_shapes` checks them)."""
        raise NotImplementedError

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        """The operation that turns this one's outputs, from inputs of `shapes`, back into
        those inputs, bit for bit."""
        raise NotImplementedError

    def input_split_dims(self, dims: Sequence[int], shapes: Sequence[Shape]) -> list[int] | None:
        """The dim each input (of `shapes`) is to be split on so that splitting the inputs and
        running the operation gives each output split on its dim of `dims` (non-negative);
        None where no such dims exist. A tensor-parallel load reads a rank's part of each
        input this way.

        A concatenation is split part by part: along its own dim that is each part's chunk,
        joined (how vLLM's ``QKVParallelLinear`` holds q, k and v), not a chunk of the whole.
        """
        return None

    def _fail(self, detail: str, shapes: Sequence[Shape]) -> LayoutError:
        return LayoutError(detail, operation=repr(self), shapes=tuple(map(tuple, shapes)))

    def _axis(self, dim: int, shapes: Sequence[Shape]) -> int:
        """`dim` counted in each of `shapes` (negative from the end), which share one rank."""
        ranks = {len(shape) for shape in shapes}
        if len(ranks) != 1:
            raise self._fail(f"takes tensors of one rank, not {sorted(ranks)}", shapes)
        (rank,) = ranks
        if not -rank <= dim < rank:
            raise self._fail(f"dim {dim} is outside a tensor of {rank} dims", shapes)
        return dim % rank

    def _one(self, shapes: Sequence[Shape]) -> Shape:
        if len(shapes) != 1:
            raise self._fail(f"takes one tensor, not {len(shapes)}", shapes)
        return tuple(shapes[0])

    def _alike_off(self, axis: int, shapes: Sequence[Shape]) -> None:
        """Refuse tensors that differ in any dim but `axis`."""
        if not shapes:
            raise self._fail("takes at least one tensor", shapes)
        rest = {shape[:axis] + shape[axis + 1 :] for shape in shapes}
        if len(rest) != 1:
            raise self._fail(f"takes tensors that differ only in dim {axis}", shapes)


class Split(LayoutOp):
    """One tensor into parts of `sizes` along `dim` (``qkv`` into ``q``, ``k``, ``v``)."""

    dim: int
    sizes: tuple[int, ...]

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        shape = self._one(shapes)
        axis = self._axis(self.dim, shapes)
        if any(size < 0 for size in self.sizes) or sum(self.sizes) != shape[axis]:
            raise self._fail(
                f"sizes add up to {sum(self.sizes)}, but dim {axis} of {list(shape)} is "
                f"{shape[axis]}",
                shapes,
            )
        return [(*shape[:axis], size, *shape[axis + 1 :]) for size in self.sizes]

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        self.output_shapes([a.shape for a in arrays])
        axis = self._axis(self.dim, [arrays[0].shape])
        edges = np.cumsum(self.sizes)[:-1].tolist()
        return list(np.split(arrays[0], edges, axis=axis))

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        self.output_shapes(shapes)
        return Concat(self.dim)

    def input_split_dims(self, dims: Sequence[int], shapes: Sequence[Shape]) -> list[int] | None:
        axis = self._axis(self.dim, shapes)  # its own dim: the parts' sizes would change
        return [dims[0]] if len(set(dims)) == 1 and dims[0] != axis else None


class Concat(LayoutOp):
    """Tensors joined along `dim` (``gate`` and ``up`` into ``gate_up``)."""

    dim: int

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        axis = self._axis(self.dim, shapes)
        self._alike_off(axis, shapes)
        first = tuple(shapes[0])
        return [(*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1 :])]

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        self.output_shapes([a.shape for a in arrays])
        return [np.concatenate(arrays, axis=self._axis(self.dim, [arrays[0].shape]))]

    def input_split_dims(self, dims: Sequence[int], shapes: Sequence[Shape]) -> list[int] | None:
        return [dims[0]] * len(shapes) if len(dims) == 1 else None

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        axis = self._axis(self.dim, shapes)
        self._alike_off(axis, shapes)
        return Split(self.dim, tuple(shape[axis] for shape in shapes))


class Chunk(LayoutOp):
    """One tensor into `count` equal parts along `dim` (``torch.chunk`` of a dim it divides)."""

    dim: int
    count: int

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        shape = self._one(shapes)
        axis = self._axis(self.dim, shapes)
        if self.count < 1 or shape[axis] % self.count:
            raise self._fail(f"dim {axis} of {list(shape)} is not {self.count} equal parts", shapes)
        part = (*shape[:axis], shape[axis] // self.count, *shape[axis + 1 :])
        return [part] * self.count

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        self.output_shapes([a.shape for a in arrays])
        return list(np.split(arrays[0], self.count, axis=self._axis(self.dim, [arrays[0].shape])))

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        self.output_shapes(shapes)
        return Concat(self.dim)


class Stack(LayoutOp):
    """Tensors of one shape stacked on a new `dim` (per-expert weights into one 3-D tensor);
    with `runs`, the list is cut into that many equal runs and each run stacked apart (a
    list of ``w1`` and then one of ``w3``, into one tensor each)."""

    dim: int
    runs: int = 1

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        if not shapes or len({tuple(s) for s in shapes}) != 1:
            raise self._fail("takes one or more tensors of one shape", shapes)
        if self.runs < 1 or len(shapes) % self.runs:
            raise self._fail(f"cannot cut {len(shapes)} tensors into {self.runs} runs", shapes)
        first = tuple(shapes[0])
        axis = self._new_axis(first, shapes)
        return [(*first[:axis], len(shapes) // self.runs, *first[axis:])] * self.runs

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        self.output_shapes([a.shape for a in arrays])
        axis = self._new_axis(arrays[0].shape, [arrays[0].shape])
        size = len(arrays) // self.runs
        return [np.stack(arrays[i : i + size], axis=axis) for i in range(0, len(arrays), size)]

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        self.output_shapes(shapes)
        return Unstack(self.dim)

    def _new_axis(self, shape: Shape, shapes: Sequence[Shape]) -> int:
        rank = len(shape) + 1
        if not -rank <= self.dim < rank:
            raise self._fail(f"dim {self.dim} is outside a result of {rank} dims", shapes)
        return self.dim % rank


class Unstack(LayoutOp):
    """Each tensor into its slices along `dim`, that dim dropped (a stacked expert tensor into
    one tensor per expert); the slices of the first tensor, then the second's."""

    dim: int

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        if not shapes:
            raise self._fail("takes at least one tensor", shapes)
        axis = self._axis(self.dim, shapes)
        return [shape[:axis] + shape[axis + 1 :] for shape in shapes for _ in range(shape[axis])]

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        self.output_shapes([a.shape for a in arrays])
        axis = self._axis(self.dim, [arrays[0].shape])
        return [view for array in arrays for view in np.moveaxis(array, axis, 0)]  # views

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        self.output_shapes(shapes)
        if len({tuple(shape) for shape in shapes}) != 1:
            raise self._fail("is undone by one Stack only for tensors of one shape", shapes)
        return Stack(self.dim, len(shapes))


class Permute(LayoutOp):
    """Each tensor's dims reordered (``(1, 0)``: GPT-2's ``Conv1D`` weight to a Linear's)."""

    axes: tuple[int, ...]

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        for shape in shapes:
            if sorted(self.axes) != list(range(len(shape))):
                raise self._fail(f"is no order of the {len(shape)} dims of {list(shape)}", shapes)
        return [tuple(shape[axis] for axis in self.axes) for shape in shapes]

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        self.output_shapes([a.shape for a in arrays])
        return [np.ascontiguousarray(np.transpose(array, self.axes)) for array in arrays]

    def input_split_dims(self, dims: Sequence[int], shapes: Sequence[Shape]) -> list[int] | None:
        return [self.axes[dim] for dim in dims] if len(dims) == len(shapes) else None

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        self.output_shapes(shapes)
        return Permute(tuple(int(axis) for axis in np.argsort(self.axes)))


class Interleave(LayoutOp):
    """Tensors cut into `groups` equal pieces along `dim` and laid out group by group:
    ``q``, ``k``, ``v`` of 2 KV groups become ``[q0, k0, v0, q1, k1, v1]``, the per-KV-head
    QKV layout of grouped-query attention checkpoints."""

    dim: int
    groups: int

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        axis = self._axis(self.dim, shapes)
        self._alike_off(axis, shapes)
        if self.groups < 1 or any(shape[axis] % self.groups for shape in shapes):
            raise self._fail(
                f"dim {axis} of every tensor must be {self.groups} equal groups", shapes
            )
        return Concat(self.dim).output_shapes(shapes)

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        self.output_shapes([a.shape for a in arrays])
        axis = self._axis(self.dim, [arrays[0].shape])
        pieces = [np.split(array, self.groups, axis=axis) for array in arrays]
        ordered = [
            pieces[part][group] for group in range(self.groups) for part in range(len(arrays))
        ]
        return [np.concatenate(ordered, axis=axis)]

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        self.output_shapes(shapes)
        axis = self._axis(self.dim, shapes)
        return Deinterleave(self.dim, self.groups, tuple(shape[axis] for shape in shapes))


class Deinterleave(LayoutOp):
    """The inverse of `Interleave`: one tensor laid out group by group into parts of `sizes`
    (each a whole number of `groups`) along `dim`."""

    dim: int
    groups: int
    sizes: tuple[int, ...]

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        self._one(shapes)
        if self.groups < 1 or any(size < 0 or size % self.groups for size in self.sizes):
            raise self._fail(f"sizes are not whole numbers of {self.groups} groups", shapes)
        return Split(self.dim, self.sizes).output_shapes(shapes)

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        self.output_shapes([a.shape for a in arrays])
        axis = self._axis(self.dim, [arrays[0].shape])
        per_group = tuple(size // self.groups for size in self.sizes)
        groups = np.split(arrays[0], self.groups, axis=axis)
        cut = [Split(axis, per_group).apply([group]) for group in groups]
        return [
            np.concatenate([cut[group][part] for group in range(self.groups)], axis=axis)
            for part in range(len(self.sizes))
        ]

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        self.output_shapes(shapes)
        return Interleave(self.dim, self.groups)


class Pipeline(LayoutOp):
    """Operations run in order, each on the list the one before made."""

    steps: tuple[LayoutOp, ...]

    def output_shapes(self, shapes: Sequence[Shape]) -> list[Shape]:
        current = list(shapes)
        for step in self.steps:
            current = step.output_shapes(current)
        return current

    def apply(self, arrays: Sequence[np.ndarray[Any, Any]]) -> Arrays:
        current = list(arrays)
        for step in self.steps:
            current = step.apply(current)
        return current

    def inverse(self, shapes: Sequence[Shape]) -> LayoutOp:
        inverses, current = [], list(shapes)
        for step in self.steps:
            inverses.append(step.inverse(current))
            current = step.output_shapes(current)
        return Pipeline(tuple(reversed(inverses)))

    def input_split_dims(self, dims: Sequence[int], shapes: Sequence[Shape]) -> list[int] | None:
        if not self.steps:
            return list(dims) if len(dims) == len(shapes) else None
        inputs = [list(shapes)]
        for step in self.steps[:-1]:
            inputs.append(step.output_shapes(inputs[-1]))
        wanted = list(dims)
        for step, step_shapes in zip(reversed(self.steps), reversed(inputs), strict=True):
            found = step.input_split_dims(wanted, step_shapes)
            if found is None:
                return None
            wanted = found
        return wanted
