"""The alignment a `GgufWriter` writes is a uint32, the only type llama.cpp reads it as.

Regression: ``{"general.alignment": 64}`` was typed as an int32 (a Python int's default), so
gguf-py refused the file ("Bad type for general.alignment field") and llama.cpp's
``gguf_get_val_u32`` would abort on it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from weightstore.entry import TensorEntry
from weightstore.errors import EntryError
from weightstore.gguf import GgufReader, GgufValue, GgufWriter, ValueType


def _entries() -> list[TensorEntry]:
    return [TensorEntry.from_array("w", np.arange(6, dtype="f4").reshape(2, 3))]


@pytest.mark.parametrize("alignment", [1, 64, GgufValue(ValueType.UINT32, 128)])
def test_the_alignment_is_written_as_a_uint32(tmp_path: Path, alignment: object) -> None:
    path = tmp_path / "model.gguf"
    GgufWriter(_entries(), {"general.alignment": alignment}).save(path)
    with GgufReader.from_file(path) as reader:
        assert reader.metadata_type("general.alignment") == "uint32"
        expected = alignment.value if isinstance(alignment, GgufValue) else alignment
        assert reader.alignment == expected and reader.data_start % reader.alignment == 0
    gguf_py = pytest.importorskip("gguf")
    oracle = gguf_py.GGUFReader(path)  # refuses any other type for the alignment
    assert oracle.alignment == expected
    np.testing.assert_array_equal(oracle.tensors[0].data, np.arange(6, dtype="f4").reshape(2, 3))


@pytest.mark.parametrize("value_type", [ValueType.INT32, ValueType.UINT64, ValueType.UINT8])
def test_an_alignment_typed_otherwise_is_refused(value_type: int) -> None:
    with pytest.raises(EntryError, match="uint32"):
        GgufWriter(_entries(), {"general.alignment": GgufValue(value_type, 64)})
