"""The transfer package's front door: its names resolve lazily, and importing it (as every
bridge does, for the plan types) loads no bridge and no pipeline."""

from __future__ import annotations

import subprocess
import sys

import pytest

import weightstore.transfer
from weightstore.base._lazy import LazyGetattr
from weightstore.transfer import _apply, _plan


def _loaded_after(code: str) -> set[str]:
    """The weightstore modules loaded by `code` in a fresh interpreter."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    return {name for name in out.split() if name.startswith("weightstore")}


def test_every_export_resolves_to_the_object_its_module_defines() -> None:
    getter = vars(weightstore.transfer)["__getattr__"]
    assert isinstance(getter, LazyGetattr)  # the one table, from lazy_exports
    exports = getter.names
    assert sorted(weightstore.transfer.__all__) == sorted(exports)
    for name, module in exports.items():
        defined = getattr(_apply if module.endswith("_apply") else _plan, name)
        assert getattr(weightstore.transfer, name) is defined, name
    assert set(exports) <= set(dir(weightstore.transfer))


def test_an_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        weightstore.transfer.no_such_name  # noqa: B018


def test_the_plan_types_load_without_the_pipeline_or_the_bridges() -> None:
    loaded = _loaded_after("from weightstore.transfer._plan import LoadPlan, LoadRules")
    assert "weightstore.transfer._apply" not in loaded
    assert not {name for name in loaded if name.startswith("weightstore.bridge")}, loaded


def test_a_bridge_loads_the_plan_but_not_the_pipeline() -> None:
    loaded = _loaded_after(
        "import numpy as np\nfrom weightstore.bridge import bridge_for\n"
        "bridge_for({'w': np.zeros(2)}).targets()"
    )
    assert "weightstore.transfer._plan" in loaded
    assert "weightstore.transfer._apply" not in loaded
