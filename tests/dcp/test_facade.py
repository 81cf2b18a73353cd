"""`weightstore.dcp`: its public names, and that importing it, or reading a checkpoint
directory without torch.distributed, imports no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import weightstore.dcp

PUBLIC = [
    "DCP_INDEX_NAME",
    "BurnpackStorageReader",
    "BurnpackStorageWriter",
    "DcpReader",
    "OpaqueValue",
    "SafetensorsStorageReader",
    "SafetensorsStorageWriter",
    "is_dcp_checkpoint",
    "open_dcp",
]


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_public_names() -> None:
    assert sorted(weightstore.dcp.__all__) == sorted(PUBLIC)
    assert set(PUBLIC) <= set(dir(weightstore.dcp))


def test_importing_it_loads_nothing_heavy() -> None:
    loaded = _loaded_after("import weightstore.dcp")
    assert loaded.isdisjoint({"torch", "numpy", "weightstore.dcp._storage"}), loaded


def test_reading_a_checkpoint_loads_no_torch() -> None:
    loaded = _loaded_after(
        "import weightstore.dcp as d\n"
        "assert d.open_dcp.__module__ == 'weightstore.dcp._reader'\n"
        "assert not d.is_dcp_checkpoint('.')"
    )
    assert "torch" not in loaded and "weightstore.dcp._reader" in loaded


def test_the_storage_classes_resolve_on_first_use() -> None:
    pytest.importorskip("torch")
    from weightstore.dcp._storage import BurnpackStorageWriter

    assert weightstore.dcp.BurnpackStorageWriter is BurnpackStorageWriter
