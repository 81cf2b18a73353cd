"""Every ggml element type, by its id: name, elements per block, bytes per block.

GGUF stores each tensor as one ggml type. Plain types (F32, F16, BF16, F64, I8..I64) are one
element per "block"; the quantized ones pack a fixed number of elements, with their scales, into
a fixed number of bytes. The ids and sizes are ggml's (gguf-py 0.19 lists the same); an id this
table lacks is refused by name (`ggml_type`), never guessed.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.errors import DTypeError

__all__ = ["GGML_TYPES", "GGML_TYPES_BY_NAME", "QK_K", "GgmlType", "ggml_type", "ggml_type_named"]

QK_K: Final = 256  # elements in one block of the K quants and most IQ types


class GgmlType(ValueRecord):
    """One ggml type.

    Attributes:
        id: the number GGUF stores in a tensor info.
        name: ggml's name (``"Q4_K"``).
        block_size: elements per block (1 for plain types).
        type_size: bytes per block.
        plain: the weightstore dtype name of a plain type (``"F32"``), or None for a quantized
            one; a plain tensor reads zero-copy.
    """

    id: int
    name: str
    block_size: int
    type_size: int
    plain: str | None

    def __init__(
        self, id: int, name: str, block_size: int, type_size: int, plain: str | None = None
    ) -> None:
        super().__init__(id, name, block_size, type_size, plain)

    @property
    def quantized(self) -> bool:
        """Whether elements are packed in blocks with scales (not a plain NumPy type)."""
        return self.plain is None

    def row_bytes(self, elements: int) -> int:
        """Bytes of `elements` elements; the caller has checked they fill whole blocks."""
        return elements // self.block_size * self.type_size

    def __repr__(self) -> str:
        return f"<ggml type {self.name}>"


def _table() -> dict[int, GgmlType]:
    k = QK_K
    rows = [
        GgmlType(0, "F32", 1, 4, "F32"),
        GgmlType(1, "F16", 1, 2, "F16"),
        GgmlType(2, "Q4_0", 32, 2 + 16),
        GgmlType(3, "Q4_1", 32, 2 + 2 + 16),
        GgmlType(6, "Q5_0", 32, 2 + 4 + 16),
        GgmlType(7, "Q5_1", 32, 2 + 2 + 4 + 16),
        GgmlType(8, "Q8_0", 32, 2 + 32),
        GgmlType(9, "Q8_1", 32, 4 + 4 + 32),
        GgmlType(10, "Q2_K", k, 2 + 2 + k // 16 + k // 4),
        GgmlType(11, "Q3_K", k, 2 + k // 4 + k // 8 + 12),
        GgmlType(12, "Q4_K", k, 2 + 2 + k // 2 + 12),
        GgmlType(13, "Q5_K", k, 2 + 2 + k // 2 + k // 8 + 12),
        GgmlType(14, "Q6_K", k, 2 + k // 2 + k // 4 + k // 16),
        GgmlType(15, "Q8_K", k, 4 + k + k // 8),
        GgmlType(16, "IQ2_XXS", k, 2 + k // 4),
        GgmlType(17, "IQ2_XS", k, 2 + k // 4 + k // 32),
        GgmlType(18, "IQ3_XXS", k, 2 + k // 4 + k // 8),
        GgmlType(19, "IQ1_S", k, 2 + k // 8 + k // 16),
        GgmlType(20, "IQ4_NL", 32, 2 + 16),
        GgmlType(21, "IQ3_S", k, 2 + k // 4 + k // 8 + k // 32 + 4),
        GgmlType(22, "IQ2_S", k, 2 + k // 4 + k // 16),
        GgmlType(23, "IQ4_XS", k, 2 + 2 + k // 2 + k // 64),
        GgmlType(24, "I8", 1, 1, "I8"),
        GgmlType(25, "I16", 1, 2, "I16"),
        GgmlType(26, "I32", 1, 4, "I32"),
        GgmlType(27, "I64", 1, 8, "I64"),
        GgmlType(28, "F64", 1, 8, "F64"),
        GgmlType(29, "IQ1_M", k, k // 8 + k // 16 + k // 32),
        GgmlType(30, "BF16", 1, 2, "BF16"),
        GgmlType(34, "TQ1_0", k, 2 + 4 * 13),
        GgmlType(35, "TQ2_0", k, 2 + 64),
        GgmlType(39, "MXFP4", 32, 1 + 16),
        GgmlType(40, "NVFP4", 64, 4 + 32),
        GgmlType(41, "Q1_0", 128, 2 + 16),
    ]
    return {row.id: row for row in rows}


GGML_TYPES: Final = MappingProxyType(_table())
"""Every known ggml type by id. Ids 4 and 5 (Q4_2, Q4_3) and 31 to 33 and 36 to 38 were
removed from ggml and hold no type today; a file naming one is refused."""

GGML_TYPES_BY_NAME: Final = MappingProxyType({t.name: t for t in GGML_TYPES.values()})
"""The same types by ggml name (``"Q4_K"``)."""


def ggml_type(type_id: int, *, path: str | None = None, tensor: str | None = None) -> GgmlType:
    """The ggml type of id `type_id`.

    Raises:
        DTypeError: no ggml type has that id (named, with the file and tensor).
    """
    found = GGML_TYPES.get(type_id)
    if found is None:
        raise DTypeError(f"unknown ggml type id {type_id}", path=path, tensor=tensor)
    return found


def ggml_type_named(name: str) -> GgmlType:
    """The ggml type called `name`, any case (``"q8_0"``).

    Raises:
        DTypeError: no ggml type has that name; the message lists the known ones.
    """
    found = GGML_TYPES_BY_NAME.get(name.upper())
    if found is None:
        known = ", ".join(GGML_TYPES_BY_NAME)
        raise DTypeError(f"no ggml type is called {name!r}; known: {known}")
    return found
