"""What importing weightstore loads: each check runs in a fresh interpreter and asserts module
sets, never timings, so ``import weightstore`` and header-only commands stay cheap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import weightstore
from weightstore.entry import TensorEntry
from weightstore.safetensors import write_bytes
from weightstore.snapshot import TensorSnapshot

HEAVY = ("numpy", "torch", "cbor2", "ml_dtypes", "tqdm", "weightstore.cli")


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_weightstore_loads_no_heavy_module() -> None:
    loaded = _loaded_after("import weightstore")
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_registry_loads_no_reader() -> None:
    loaded = _loaded_after("import weightstore.formats")
    assert loaded.isdisjoint({"cbor2", "ml_dtypes", "tqdm", "torch"})
    assert "weightstore.burnpack._reader" not in loaded
    assert "weightstore.burnpack._layout" not in loaded  # the record carries magic and extension
    assert "weightstore.pytorch_reader._machine" not in loaded


def test_every_public_name_resolves() -> None:
    for name in weightstore.__all__:
        assert getattr(weightstore, name) is not None, name
    assert set(weightstore.__all__) <= set(dir(weightstore))


def test_lazy_names_are_the_defining_modules_objects() -> None:
    from weightstore.errors import WeightstoreError
    from weightstore.stores import SafetensorsStore

    assert weightstore.SafetensorsStore is SafetensorsStore
    assert weightstore.WeightstoreError is WeightstoreError
    assert weightstore.TensorSnapshot is TensorSnapshot


def test_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        weightstore.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", ["weightstore.burnpack", "weightstore.safetensors"])
def test_container_packages_list_their_lazy_names(package: str) -> None:
    module = __import__(package, fromlist=["__all__"])
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def _inspect_json(tmp_path: Path) -> set[str]:
    """The modules `weightstore inspect --json` of a small SafeTensors file loads."""
    path = tmp_path / "m.safetensors"
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    path.write_bytes(write_bytes([TensorEntry.from_array("w", data)]))
    code = (
        f"from weightstore.cli import main\nassert main(['inspect', '--json', {str(path)!r}]) == 0"
    )
    return _loaded_after(code)


def test_inspect_json_of_safetensors_loads_only_its_command(tmp_path: Path) -> None:
    loaded = _inspect_json(tmp_path)
    assert loaded.isdisjoint({"cbor2", "ml_dtypes", "tqdm", "torch"}), loaded
    assert "weightstore.cli._convert" not in loaded
    assert "weightstore.burnpack._reader" not in loaded
    assert "weightstore.pytorch_reader._machine" not in loaded


def test_inspect_json_of_safetensors_loads_no_numpy(tmp_path: Path) -> None:
    assert "numpy" not in _inspect_json(tmp_path)


def test_inspect_json_of_burnpack_loads_cbor2_but_no_numpy(tmp_path: Path) -> None:
    from weightstore.burnpack import write_bytes as write_burnpack

    path = tmp_path / "m.bpk"
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    path.write_bytes(write_burnpack([TensorEntry.from_array("w", data)]))
    loaded = _loaded_after(
        f"from weightstore.cli import main\nassert main(['inspect', '--json', {str(path)!r}]) == 0"
    )
    assert "cbor2" in loaded  # the header is CBOR
    assert loaded.isdisjoint({"numpy", "ml_dtypes", "tqdm", "torch"}), loaded & set(HEAVY)


def test_module_snapshot_defers_the_model_walking_machinery() -> None:
    loaded = _loaded_after("from weightstore.module_snapshot import load_from, save_into")
    assert "weightstore.transfer" not in loaded
    assert "weightstore.bridge" not in loaded


def test_module_snapshot_re_exports_transfer_functions_on_first_use() -> None:
    from weightstore import module_snapshot, transfer

    assert module_snapshot.apply is transfer.apply
    assert module_snapshot.collect is transfer.collect
    with pytest.raises(AttributeError, match="no_such_name"):
        module_snapshot.no_such_name  # noqa: B018
