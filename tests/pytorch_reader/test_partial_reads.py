"""Slices of a checkpoint read by pread read only their bytes (`LazyTensor.read_part`): the
values NumPy's indexing of the whole tensor gives, for rows, columns, steps, single elements
and views with a storage offset, big-endian files included; tensors no run plan fits (strided
views, a compressed entry) still read whole and give the same values."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from tests.pytorch_reader import _support as pk  # pickle opcodes and a zip writer
from weightstore.io._source import PreadSource
from weightstore.pytorch_reader import PytorchReader, _archive

KEYS: list[Any] = [
    np.s_[3:17], np.s_[:, 5:9], np.s_[::-3, 2], np.s_[7], np.s_[..., -1], np.s_[40:2:-5, ::4],
    np.s_[5:5], np.s_[:], np.s_[2, 3],
]  # fmt: skip


class _Counting(PreadSource):
    """The storage source of a pread reader, adding up the bytes each read returns."""

    read_bytes: ClassVar[int] = 0

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        _Counting.read_bytes += size
        return super().read(offset, size, what, tensor)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> type[_Counting]:
    monkeypatch.setattr(_archive, "PreadSource", _Counting)
    _Counting.read_bytes = 0
    return _Counting


def test_slices_match_numpy_and_read_only_their_bytes(
    tmp_path: Path, counted: type[_Counting]
) -> None:
    torch = pytest.importorskip("torch")
    base = torch.arange(64 * 48, dtype=torch.float32).reshape(64, 48)
    state = {
        "matrix": base,
        "offset": base[8:],  # a view starting past its storage's first element
        "half": torch.arange(64 * 48, dtype=torch.bfloat16).reshape(64, 48),
        "strided": base.t(),  # no run plan fits: read whole
    }
    torch.save(state, tmp_path / "m.pt")
    with PytorchReader.from_file(tmp_path / "m.pt", mode="pread") as reader:
        for name in state:
            whole = reader.get(name)
            part = reader.get_slice(name)
            for key in KEYS:
                counted.read_bytes = 0
                got = part[key]
                want = whole[key]
                assert got.dtype == want.dtype and got.shape == want.shape, (name, key)
                assert got.tobytes() == np.ascontiguousarray(want).tobytes(), (name, key)
                if name != "strided":
                    # The selected elements' span in each run's row: no more than the rows the
                    # selection touches, so a 14-row slice reads 14 of 64 rows.
                    assert counted.read_bytes <= _rows_touched(whole, key) * whole[0].nbytes
            counted.read_bytes = 0
            part[:4]
            limit = whole.nbytes if name == "strided" else 4 * whole[0].nbytes
            assert counted.read_bytes == limit, name


def _rows_touched(whole: np.ndarray[Any, Any], key: Any) -> int:
    rows = np.arange(len(whole)).reshape(-1, *(1,) * (whole.ndim - 1))
    picked = np.broadcast_to(rows, whole.shape)[key]
    return 0 if picked.size == 0 else int(picked.max() - picked.min() + 1)


def test_a_column_slice_reads_one_run_per_row(tmp_path: Path, counted: type[_Counting]) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.zeros(256, 1024)}, tmp_path / "w.pt")
    with PytorchReader.from_file(tmp_path / "w.pt", mode="pread") as reader:
        counted.read_bytes = 0
        assert reader.get_slice("w")[:, 256:512].shape == (256, 256)
    assert counted.read_bytes == 256 * 256 * 4  # a quarter of the tensor, not all of it


def test_a_big_endian_file_is_swapped_after_a_partial_read(
    tmp_path: Path, counted: type[_Counting]
) -> None:
    values = np.arange(30, dtype=">f4").reshape(5, 6)
    body = pk.op_dict([(pk.op_str("w"), pk.op_tensor(pk.op_storage("0", 30), 0, (5, 6), (6, 1)))])
    path = pk.write_zip(
        tmp_path / "big.pt", pk.pickle_of(body), {"0": values.tobytes()}, byteorder="big"
    )
    with PytorchReader.from_file(path, mode="pread") as reader:
        part = reader.get_slice("w")[1:3, 2:]
    assert np.array_equal(part, values.astype("<f4")[1:3, 2:])
    assert part.dtype == np.dtype("<f4")
    assert counted.read_bytes == 2 * 4 * 4  # two rows of four elements: one run each


def test_a_compressed_entry_reads_whole_with_the_same_values(
    tmp_path: Path, counted: type[_Counting]
) -> None:
    values = np.arange(40, dtype=np.float32).reshape(8, 5)
    body = pk.op_dict([(pk.op_str("w"), pk.op_tensor(pk.op_storage("0", 40), 0, (8, 5), (5, 1)))])
    path = tmp_path / "deflated.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", pk.pickle_of(body))
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/data/0", values.tobytes())
    with PytorchReader.from_file(path, mode="pread") as reader:
        assert np.array_equal(reader.get_slice("w")[2:4], values[2:4])


def test_a_mapped_file_gives_views_as_before(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.arange(12.0).reshape(3, 4)}, tmp_path / "w.pt")
    with PytorchReader.from_file(tmp_path / "w.pt") as reader:
        whole = reader.get("w")
        assert np.shares_memory(reader.get_slice("w")[1:], whole)  # no copy of the mapping
