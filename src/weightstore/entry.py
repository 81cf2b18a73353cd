"""What a container writer is handed: one `TensorEntry` per tensor, data now or on demand.

Writers (burnpack, SafeTensors) share this interface. An entry declares its name, dtype, shape and
byte length up front, so a writer can lay out the whole header before touching any data; the
bytes come either directly or from a zero-argument function that the writer calls once, in write
order, and drops before asking for the next. That is what bounds a save's peak memory by the
largest tensor instead of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np

from weightstore.base._record import ValueRecord, field
from weightstore.dtypes import DType, from_numpy
from weightstore.errors import EntryError

__all__ = ["Buffer", "TensorEntry", "as_byte_view"]

Buffer: TypeAlias = "bytes | bytearray | memoryview | np.ndarray[Any, Any]"
"""Tensor bytes as a writer accepts them: anything exposing the buffer protocol, or an array
(made C-contiguous and little-endian first, see `as_byte_view`)."""


def as_byte_view(data: Buffer) -> memoryview:
    """A flat, byte-format view of `data` without copying when it is already laid out right.

    Arrays are copied only when they are not C-contiguous or not little-endian, since the file
    formats store C order, little-endian.
    """
    if isinstance(data, np.ndarray):
        array = data
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        array = np.ascontiguousarray(array)
        return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class TensorEntry(ValueRecord):
    """One tensor for a writer.

    Attributes:
        name: the tensor's key in the file.
        dtype: element type: a row of the dtype table, looked up by name
            (``weightstore.dtypes.from_name("F32")``) or by another spelling (`from_numpy`,
            `from_safetensors`, `from_torch` in `weightstore.dtypes`). `DType` is never built
            by hand: ``DType("F32")`` raises `TypeError`, since a row carries every spelling.
        shape: dimensions, outermost first.
        data: the bytes, or a function returning them when the writer gets to this tensor.
        param_id: burnpack parameter id (u64), ignored by formats without one.
        nbytes: declared byte length; computed from shape and dtype when omitted (required for
            quantized dtypes, whose length follows their scheme).
        quant_scheme: the decoded burnpack QFloat scheme, kept verbatim.
        blocks: the tensor's quantized blocks as its source stores them, ``(ggml type name,
            producer of the bytes)``, for a writer that can keep them (GGUF copies them byte
            for byte); the others write `data`, the same tensor's values.

    Example:
        >>> import numpy as np
        >>> from weightstore import dtypes
        >>> TensorEntry.from_array("w", np.ones((2, 3), np.float16)).dtype  # looked up for you
        DType(F16)
        >>> def load_big() -> np.ndarray:  # called once, when the writer reaches this tensor
        ...     return np.zeros((1024, 256), np.float32)
        >>> big = TensorEntry("big", dtypes.from_name("F32"), (1024, 256), load_big)
        >>> big.nbytes
        1048576
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    data: Buffer | Callable[[], Buffer]
    param_id: int | None = None
    nbytes: int = -1
    quant_scheme: Mapping[str, Any] | None = field(default=None, compare=False)
    blocks: tuple[str, Callable[[], Buffer]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # Both formats store names as UTF-8; a Python str may hold a lone surrogate (from a
        # pickle or JSON escape) that no UTF-8 encoder takes, so refuse it before any writing.
        try:
            self.name.encode("utf-8")
        except (UnicodeEncodeError, AttributeError):
            raise EntryError(
                "name is not text that UTF-8 can hold (a lone surrogate)", tensor=self.name
            ) from None
        if self.nbytes < 0:
            if self.dtype.kind == "q":
                raise EntryError("a quantized entry must declare nbytes", tensor=self.name)
            self._set("nbytes", self.dtype.nbytes(self.shape))

    @classmethod
    def from_array(
        cls, name: str, array: np.ndarray[Any, Any], param_id: int | None = None
    ) -> TensorEntry:
        """An entry holding `array` itself, its dtype looked up in the dtype table
        (`weightstore.dtypes.from_numpy`).

        Raises:
            DTypeError: NumPy's dtype has no row in the table (object, string, ...).
        """
        return cls(name, from_numpy(array.dtype), tuple(array.shape), array, param_id, -1, None)

    def read(self) -> memoryview:
        """The entry's bytes, produced now, checked against the declared length."""
        produced = self.data() if callable(self.data) else self.data
        view = as_byte_view(produced)
        if view.nbytes != self.nbytes:
            raise EntryError(
                f"data is {view.nbytes:,} bytes, but dtype {self.dtype.name} and shape "
                f"{list(self.shape)} declare {self.nbytes:,}",
                tensor=self.name,
            )
        return view
