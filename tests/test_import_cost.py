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

HEAVY = ("numpy", "torch", "jax", "flax", "cbor2", "ml_dtypes", "tqdm", "weightstore.cli")


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
    assert "weightstore.transfer._apply" not in loaded
    assert "weightstore.transfer._plan" not in loaded
    assert "weightstore.bridge" not in loaded


def test_module_snapshot_re_exports_transfer_functions_on_first_use() -> None:
    from weightstore import module_snapshot
    from weightstore.transfer import _apply

    assert module_snapshot.apply is _apply.apply
    assert module_snapshot.collect is _apply.collect
    with pytest.raises(AttributeError, match="no_such_name"):
        module_snapshot.no_such_name  # noqa: B018


# What a store loads with its first load or save, not with its import: the model-walking,
# snapshot, adapter, load-report and writing machinery, and the dtype table.
STORE_DEFERRED = (
    "weightstore.adapters",
    "weightstore.report",
    "weightstore.bridge",
    "weightstore.entry",
    "weightstore.paths",
    "weightstore.snapshot",
    "weightstore.transfer",
    "weightstore.transfer._plan",
    "weightstore.transfer._apply",
    "weightstore.io._atomic",
    "weightstore.io._source",
    "weightstore.container._reader",
    "weightstore.dtypes",
)


def test_store_import_defers_the_load_and_save_machinery() -> None:
    loaded = _loaded_after("from weightstore import SafetensorsStore, load_from")
    assert loaded.isdisjoint(STORE_DEFERRED), sorted(loaded & set(STORE_DEFERRED))
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


# What a plain load (no filter, remapping, adapter or index mapping) never needs: importing
# any of these would put its module's execution inside the first load's time.
PLAIN_LOAD_SKIPS = (
    "weightstore.paths",
    "weightstore.paths._filter",
    "weightstore.paths._regex",
    "weightstore.paths._remap",
    "weightstore.adapters",
    "difflib",
)


def test_plain_first_load_skips_path_adapter_and_failure_machinery(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    entry = TensorEntry.from_array("fc.weight", np.ones((2, 3), np.float32))
    path.write_bytes(write_bytes([entry]))
    code = (
        "import numpy as np\n"
        "from weightstore import SafetensorsStore, load_from\n"
        "model = {'fc': {'weight': np.zeros((2, 3), np.float32)}}\n"
        f"result = load_from(model, SafetensorsStore.from_file({str(path)!r}))\n"
        "assert result.applied == ['fc.weight'] and model['fc']['weight'].sum() == 6\n"
    )
    loaded = _loaded_after(code)
    assert "weightstore.transfer._apply" in loaded  # the load did run
    assert loaded.isdisjoint(PLAIN_LOAD_SKIPS), sorted(loaded & set(PLAIN_LOAD_SKIPS))


def test_load_failed_error_is_one_class_under_every_name() -> None:
    from weightstore.errors import LoadFailedError as defined
    from weightstore.stores import LoadFailedError

    assert LoadFailedError is defined
    assert weightstore.LoadFailedError is defined


def test_the_error_family_loads_no_load_report() -> None:
    # LoadFailedError lives with the other errors, which every layer imports: catching it
    # must not bring the load report's module (or the store's failure text) along.
    loaded = _loaded_after("from weightstore import LoadFailedError, SetWarning")
    assert loaded.isdisjoint({"weightstore.report", "weightstore.stores"}), loaded


def test_store_options_keep_frozen_dataclass_behaviour() -> None:
    from weightstore.stores import StoreOptions

    options = StoreOptions(durable=False)
    changed = options.replace(overwrite=True)
    assert (changed.overwrite, changed.durable, options.overwrite) == (True, False, False)
    assert changed.filter == options.filter  # the defaults are built on first use, equal
    assert changed.replace(overwrite=False) == options
    assert options == StoreOptions(filter=options.filter, remapper=options.remapper, durable=False)
    assert options != changed
    with pytest.raises(AttributeError):
        options.durable = True
    with pytest.raises(TypeError, match="no_such_option"):
        options.replace(no_such_option=1)


def _torch_save_style_zip(path: Path) -> Path:
    """A zip checkpoint as ``torch.save(state_dict)`` writes one (float32 and int64 tensors
    in an OrderedDict), built without torch."""
    from tests.pytorch_reader import _support as pt

    weight = pt.op_tensor(pt.op_storage("0", 6), 0, (2, 3), (3, 1))
    steps = pt.op_tensor(pt.op_storage("1", 1, "LongStorage"), 0, (), ())
    state = pt.op_call(pt.op_global("collections", "OrderedDict"))
    state += b"(" + pt.op_str("layer.weight") + weight + pt.op_str("steps") + steps + b"u"
    storages = {"0": np.arange(6, dtype="<f4").tobytes(), "1": np.int64(7).tobytes()}
    return pt.write_zip(path, pt.pickle_of(state), storages)


def test_inspect_json_of_torch_save_zip_loads_no_numpy(tmp_path: Path) -> None:
    path = _torch_save_style_zip(tmp_path / "m.pt")
    loaded = _loaded_after(
        f"from weightstore.cli import main\nassert main(['inspect', '--json', {str(path)!r}]) == 0"
    )
    assert loaded.isdisjoint({"numpy", "ml_dtypes", "torch", "cbor2"}), loaded & set(HEAVY)
    assert "weightstore.pytorch_reader._torchscript" not in loaded  # only for TorchScript files
    assert "weightstore.pytorch_reader._legacy" not in loaded


def test_torch_save_zip_listing_is_what_inspect_reads(tmp_path: Path) -> None:
    """The file above lists as intended, so the import check is about a real listing."""
    from weightstore.pytorch_reader import PytorchReader

    with PytorchReader(_torch_save_style_zip(tmp_path / "m.pt")) as reader:
        assert reader.get("layer.weight").tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        assert reader.get("steps").tolist() == 7


def test_commands_on_one_file_load_no_set_module(tmp_path: Path) -> None:
    # Every command asks of each path whether it names a set or a DCP checkpoint (`locate`):
    # for one file, answering loads no set or DCP module at all, the naming rules included.
    path = tmp_path / "w.safetensors"
    path.write_bytes(write_bytes([TensorEntry.from_array("w", np.ones(2, np.float32))]))
    code = (
        "import contextlib, io\nfrom weightstore import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    for argv in (['inspect', {str(path)!r}], ['verify', '-q', {str(path)!r}],\n"
        f"                 ['diff', {str(path)!r}, {str(path)!r}]):\n"
        "        assert cli.main(argv) == 0\n"
    )
    multi_file = ("weightstore.sets", "weightstore.dcp")
    loaded = {name for name in _loaded_after(code) if name.startswith(multi_file)}
    assert loaded == set()
