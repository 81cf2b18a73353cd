"""Golden bytes and constants of the burnpack layout."""

from __future__ import annotations

import cbor2
import numpy as np
import pytest

from weightstore import burnpack
from weightstore.burnpack import Scalar, data_start
from weightstore.burnpack._layout import HEADER_SIZE, MAGIC, TENSOR_ALIGNMENT, encode_metadata
from weightstore.entry import TensorEntry

# The burn-pack README example: one F32 tensor "weight" [2, 2] = 1..4, param_id 42, one metadata
# pair. Burn's format tests pin these bytes.
README_HEADER = bytes.fromhex("4e525542 0100 62000000")  # "NRUB", version 1, metadata_size 98
README_METADATA = bytes.fromhex(
    "a2 67 74656e736f7273"  # {"tensors":
    " a1 66 776569676874"  # {"weight":
    " a4 65 6474797065 63 463332"  # {"dtype": "F32",
    " 65 7368617065 82 02 02"  # "shape": [2, 2],
    " 6c 646174615f6f666673657473 82 00 10"  # "data_offsets": [0, 16],
    " 68 706172616d5f6964 18 2a"  # "param_id": 42}},
    " 68 6d65746164617461 a1 68 70726f6475636572"  # "metadata": {"producer":
    " 6e 6275726e2d7061636b20646f6373"  # "burn-pack docs"}}
)
README_DATA = np.array([1, 2, 3, 4], "<f4").tobytes()


def test_constants() -> None:
    assert HEADER_SIZE == 10
    assert MAGIC == 0x4255524E
    assert MAGIC.to_bytes(4, "little") == b"NRUB"


@pytest.mark.parametrize("metadata_size", [0, 1, 10, 245, 246, 247, 4096])
def test_data_start_is_aligned_and_tight(metadata_size: int) -> None:
    start = data_start(metadata_size)
    assert start % TENSOR_ALIGNMENT == 0
    assert HEADER_SIZE + metadata_size <= start < HEADER_SIZE + metadata_size + TENSOR_ALIGNMENT


def test_readme_example_is_byte_exact() -> None:
    entry = TensorEntry.from_array("weight", np.array([[1, 2], [3, 4]], "<f4"), param_id=42)
    written = burnpack.write_bytes([entry], {"producer": "burn-pack docs"})
    expected = README_HEADER + README_METADATA + bytes(148) + README_DATA
    assert written.hex(" ") == expected.hex(" ")
    assert len(written) == 272


def test_empty_pack_is_one_aligned_block() -> None:
    written = burnpack.write_bytes([])
    assert written[10:20] == bytes.fromhex("a1 67 74656e736f7273 a0")  # {"tensors": {}}
    assert len(written) == 256
    assert written[20:] == bytes(256 - 20)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0.5, "f9 3800"),  # exact in half precision
        (1.0e10, "fa 501502f9"),  # exact in single precision only
        (0.001, "fb 3f50624dd2f1a9fc"),  # needs double
        (float("inf"), "f9 7c00"),
    ],
)
def test_scalar_floats_use_the_shortest_exact_width(value: float, encoded: str) -> None:
    block = encode_metadata([], {}, {"x": Scalar("Float", value)})
    # {"tensors": {}, "scalars": {"x": {"Float": <value>}}}
    prefix = "a2 67 74656e736f7273 a0 67 7363616c617273 a1 61 78 a1 65 466c6f6174 "
    assert block.hex(" ") == bytes.fromhex(prefix + encoded).hex(" ")
    assert cbor2.loads(block)["scalars"]["x"]["Float"] == value


def test_scalar_kinds_are_encoded_as_burn_enum_variants() -> None:
    block = encode_metadata(
        [], {}, {"a": Scalar.of(-3), "b": Scalar("UInt", 42), "c": Scalar.of(True)}
    )
    assert cbor2.loads(block)["scalars"] == {
        "a": {"Int": -3},
        "b": {"UInt": 42},
        "c": {"Bool": True},
    }


def test_scalar_rejects_values_outside_its_kind() -> None:
    with pytest.raises(ValueError, match="not a valid burnpack scalar"):
        Scalar("UInt", -1)
    with pytest.raises(ValueError, match="not a valid burnpack scalar"):
        Scalar("Int", 2**63)
    with pytest.raises(TypeError):
        Scalar.of("text")  # type: ignore[arg-type]
