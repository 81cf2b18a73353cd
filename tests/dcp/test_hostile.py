"""Hostile DCP indexes a fuzzer found, through the front doors: `Store.from_file`,
`open_reader` and the CLI each refuse them with a typed error (the CLI: exit 2 and one line),
and finish, where they raised a foreign `ValueError` or took minutes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._optional import need
from weightstore import Store, open_reader
from weightstore.cli import main as cli
from weightstore.dcp._index import DCP_INDEX_NAME
from weightstore.errors import WeightstoreError

from .test_index import index_of
from .test_tiling import finishing_within, staircase

_COLLIDING = 2**61 - 1  # every multiple of it hashes to 0


def empty(shape: list[int]) -> dict[str, Any]:
    return {"w": {"dtype": "F32", "shape": shape, "chunks": []}}


def gap_in_staircase() -> dict[str, Any]:
    tensor = staircase(10_000)
    del tensor["chunks"][2 * 5_000 + 1]
    return {"w": tensor}


HOSTILE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "digits": (empty([10**1000] * 5), {}),  # its element count has 5,000 digits
    "huge-empty": (empty([0, 2**64]), {}),
    "huge-product": (empty([2**62, 2**62, 0]), {}),
    "staircase-gap": (gap_in_staircase(), {}),
    "colliding-keys": ({}, {"v": {"$dict": [[i * _COLLIDING, i] for i in range(1, 40_000)]}}),
}


@pytest.fixture(params=sorted(HOSTILE))
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    tensors, values = HOSTILE[request.param]
    (tmp_path / DCP_INDEX_NAME).write_bytes(index_of(tensors, values))
    return tmp_path


def test_stores_and_readers_refuse_with_a_typed_error(hostile: Path) -> None:
    with finishing_within(60):
        with pytest.raises(WeightstoreError):
            Store.from_file(str(hostile))
        with pytest.raises(WeightstoreError):
            open_reader(str(hostile))


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--json"], ["verify"]])
def test_the_cli_exits_2_with_one_line(hostile: Path, command: list[str], capsys: Any) -> None:
    with finishing_within(60):
        assert cli([*command, str(hostile)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("weightstore: error:"), lines
    assert "internal error" not in lines[0]


def test_torch_read_metadata_refuses_with_a_typed_error(hostile: Path) -> None:
    # DCP's own entry: `dcp.load` calls the storage reader's read_metadata first.
    need("torch")
    from weightstore.dcp import BurnpackStorageReader

    with finishing_within(60), pytest.raises(WeightstoreError):
        BurnpackStorageReader(str(hostile)).read_metadata()
