"""What every refusal of a quantized group must show: a `QuantizedLayoutError` whose fields name
the group, the codes and the companion at fault, a message naming both tensors, and (for the
dequantizers) no allocation of what the claimed sizes imply."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from weightstore.errors import QuantizedLayoutError

PEAK_LIMIT = 1 << 20
"""Bytes a refusal may allocate: the inputs here are a few KB, the claimed outputs terabytes."""


def refused(
    call: Callable[[], Any],
    *,
    group: str,
    codes: str,
    companion: str | None,
    match: str | None = None,
) -> QuantizedLayoutError:
    """Run `call`, expecting the refusal described, within `PEAK_LIMIT` bytes allocated."""
    tracemalloc.start()
    try:
        with pytest.raises(QuantizedLayoutError, match=match) as caught:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    error = caught.value
    assert (error.group, error.codes, error.companion) == (group, codes, companion)
    assert error.tensor == group
    assert repr(codes) in str(error)
    if companion is not None:
        assert repr(companion) in str(error)
    assert peak < PEAK_LIMIT, f"{peak:,} bytes allocated before the refusal"
    return error
