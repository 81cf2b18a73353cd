"""The dtype table: every name maps back and forth, widths and predicates are right."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from weightstore import dtypes
from weightstore.dtypes import ALL_DTYPES
from weightstore.errors import DTypeError


def test_names_are_unique_in_every_column() -> None:
    for column in ("name", "safetensors", "torch"):
        values = [getattr(d, column) for d in ALL_DTYPES if getattr(d, column)]
        assert len(values) == len(set(values)), column


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d.safetensors], ids=str)
def test_safetensors_names_round_trip(dtype: dtypes.DType) -> None:
    assert dtypes.from_safetensors(dtypes.to_safetensors(dtype)) is dtype


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d.burnpack], ids=str)
def test_burnpack_values_round_trip(dtype: dtypes.DType) -> None:
    assert dtypes.from_burnpack(dtypes.to_burnpack(dtype)) is dtype


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d.torch], ids=str)
def test_torch_names_round_trip(dtype: dtypes.DType) -> None:
    assert dtypes.from_torch(f"torch.{dtype.torch}") is dtype


def test_numpy_lookup_prefers_plain_types() -> None:
    assert dtypes.from_numpy(np.float32).name == "F32"  # not Flex32
    assert dtypes.from_numpy(np.uint8).name == "U8"  # not Bool(U8)
    assert dtypes.from_numpy(np.bool_).name == "BOOL"
    assert dtypes.from_numpy(np.dtype(">i4")).name == "I32"
    assert dtypes.from_numpy(ml_dtypes.bfloat16).name == "BF16"
    assert dtypes.from_numpy(ml_dtypes.float8_e4m3fn).name == "F8_E4M3"


def test_itemsizes_match_numpy() -> None:
    for dtype in ALL_DTYPES:
        if dtype.numpy is not None:
            assert dtype.itemsize == dtype.numpy.itemsize, dtype


def test_sub_byte_dtypes_have_no_itemsize_but_pack() -> None:
    f4 = dtypes.from_safetensors("F4")
    assert f4.nbytes((3,)) == 2  # three 4-bit elements round up to two bytes
    with pytest.raises(DTypeError, match="4-bit"):
        _ = f4.itemsize


def test_predicates() -> None:
    assert dtypes.from_name("BF16").is_float and not dtypes.from_name("BF16").is_int
    assert dtypes.from_name("U32").is_int and dtypes.from_name("BOOL_U32").is_bool


def test_torch_storage_classes() -> None:
    assert dtypes.from_torch_storage("FloatStorage").name == "F32"
    assert dtypes.from_torch_storage("BFloat16Storage").name == "BF16"
    with pytest.raises(DTypeError, match="NopeStorage"):
        dtypes.from_torch_storage("NopeStorage")


def test_a_format_that_cannot_hold_a_dtype_names_both() -> None:
    with pytest.raises(DTypeError, match="C64 cannot be stored in burnpack"):
        dtypes.to_burnpack(dtypes.from_name("C64"))
    with pytest.raises(DTypeError, match="FLEX32 cannot be stored in SafeTensors"):
        dtypes.to_safetensors(dtypes.from_name("FLEX32"))


@pytest.mark.parametrize(
    "bad", [("F128", dtypes.from_safetensors), ({"Bool": "U16"}, dtypes.from_burnpack),
            ("float128", dtypes.from_torch), (np.dtype("U4"), dtypes.from_numpy)],
)  # fmt: skip
def test_unknown_names_are_refused(bad: tuple[object, object]) -> None:
    value, lookup = bad
    with pytest.raises(DTypeError):
        lookup(value)  # type: ignore[operator]


def test_rows_compare_by_identity_or_fields_and_hash_by_name() -> None:
    f32 = dtypes.from_name("F32")
    copy = dtypes.DType("F32", 32, "f", "F32", "F32", "float32", "<f4")
    assert f32 == copy and hash(f32) == hash(copy) == hash("F32")
    assert {f32: 1}[copy] == 1
    assert f32 != dtypes.from_name("FLEX32")  # same NumPy dtype, another row
    assert dtypes.from_name("BOOL_U8") != dtypes.from_name("U8")
    assert f32 != "F32"


def test_from_numpy_of_a_native_dtype_imports_no_ml_dtypes() -> None:
    code = (
        "import sys, numpy as np\nfrom weightstore import dtypes\n"
        "assert dtypes.from_numpy(np.float32).name == 'F32'\n"
        "assert dtypes.from_numpy(np.dtype('>u2')).name == 'U16'\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "import ml_dtypes\nassert dtypes.from_numpy(ml_dtypes.bfloat16).name == 'BF16'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_numpy_itemsize_agrees_with_the_numpy_dtype(dtype: dtypes.DType) -> None:
    expected = None if dtype.numpy is None else dtype.numpy.itemsize
    assert dtype.numpy_itemsize == expected


def test_numpy_itemsize_of_a_native_dtype_imports_nothing() -> None:
    code = (
        "import sys\nfrom weightstore import dtypes\n"
        "assert dtypes.from_torch('float32').numpy_itemsize == 4\n"
        "assert dtypes.from_torch('complex128').numpy_itemsize == 16\n"
        "assert dtypes.from_safetensors('F4').numpy_itemsize is None\n"
        "assert 'numpy' not in sys.modules and 'ml_dtypes' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
