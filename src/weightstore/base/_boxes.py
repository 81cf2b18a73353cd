"""The box a reader's ``get_dequantized_part`` decodes: a tuple of slices, checked against a
shape and normalized to one range per dim. Shared by the burnpack and PyTorch readers, which
both cut a quantized tensor stored as one object; standard library only."""

from __future__ import annotations

from weightstore.base._render import bounded_repr
from weightstore.errors import SliceError

__all__ = ["box_ranges", "range_slice"]


def box_ranges(
    index: object, shape: tuple[int, ...], *, path: str | None, tensor: str | None
) -> tuple[range, ...]:
    """`index`, a tuple of at most one slice per dim (any step), as one range per dim of
    `shape`, each as ``range(size)[slice]`` normalizes it.

    Raises:
        SliceError: `index` is not such a tuple, or a slice has a zero step or a bound that is
            not an integer.
    """
    if (
        not isinstance(index, tuple)
        or len(index) > len(shape)
        or not all(isinstance(item, slice) for item in index)
    ):
        raise SliceError(
            f"a part is cut by at most {len(shape)} slices, not {bounded_repr(index)}",
            path=path,
            tensor=tensor,
        )
    key = index + (slice(None),) * (len(shape) - len(index))
    try:
        return tuple(range(size)[item] for size, item in zip(shape, key, strict=True))
    except (TypeError, ValueError) as err:  # a zero step, a bound that is no integer
        raise SliceError(bounded_repr(str(err)), path=path, tensor=tensor) from None


def range_slice(kept: range, offset: int = 0) -> slice:
    """The slice that selects `kept` (a range `box_ranges` gave) from an array whose first
    index is `offset` of the whole; a descending range runs through index 0 with a ``None``
    stop, which no integer spells."""
    stop = kept.stop - offset
    return slice(kept.start - offset, stop if stop >= 0 else None, kept.step)
