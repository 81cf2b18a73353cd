"""Helpers for the command-line tests: run ``python -m weightstore``, build files, read them back.

Every file a test uses is written here into the test's `tmp_path`; nothing comes from
``../shared``. The small model below is in torch's layout (Linear weights ``[out, in]``, norm
parameters ``weight``/``bias``) so the layout adapters have something to change.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import burnpack, open_reader, safetensors
from weightstore.entry import TensorEntry

ERROR_PREFIX = "weightstore: error: "
FORMAT_SUFFIX = {"burnpack": ".bpk", "safetensors": ".safetensors", "pytorch": ".pt"}


def run_cli(
    *args: object, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m weightstore ARGS`` in a subprocess; stdout and stderr as UTF-8 text (an
    undecodable byte fails the test). Progress bars stay off unless `env` asks (no terminal)."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "weightstore", *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        env=environment,
        timeout=120,
        check=False,
    )


def assert_error(done: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    """The run failed with `code`, printing exactly one error line holding every fragment."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(errors) == 1, done.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])


def torch_layout_arrays(seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    """A conv, a batch norm, a layer norm and a linear layer, as torch names and lays them out."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray[Any, Any]:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "conv.weight": normal(4, 3, 3, 3),
        "conv.bias": normal(4),
        "bn.weight": normal(4),
        "bn.bias": normal(4),
        "bn.running_mean": normal(4),
        "bn.running_var": np.abs(normal(4)),
        "bn.num_batches_tracked": np.array(7, dtype=np.int64),
        "ln.weight": normal(5),
        "ln.bias": normal(5),
        "fc.weight": normal(5, 7),  # [out, in]
        "fc.bias": normal(5),
    }


def burn_layout_arrays(seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    """`torch_layout_arrays` as Burn lays it out: Linear transposed, norms' gamma and beta."""
    arrays = torch_layout_arrays(seed)
    burn = {name: array for name, array in arrays.items() if name != "bn.num_batches_tracked"}
    burn["fc.weight"] = np.ascontiguousarray(arrays["fc.weight"].T)
    for norm in ("bn", "ln"):
        burn[f"{norm}.gamma"] = burn.pop(f"{norm}.weight")
        burn[f"{norm}.beta"] = burn.pop(f"{norm}.bias")
    return burn


def write_weights(
    fmt: str,
    path: Path,
    arrays: Mapping[str, np.ndarray[Any, Any]],
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """`arrays` saved as `fmt` (``burnpack``, ``safetensors`` or ``pytorch``) at `path`."""
    entries = [TensorEntry.from_array(name, array) for name, array in arrays.items()]
    if fmt == "burnpack":
        burnpack.write_file(path, entries, metadata, auto_extension=False)
    elif fmt == "safetensors":
        safetensors.write_file(path, entries, metadata)
    else:
        torch = pytest.importorskip("torch")
        torch.save({name: torch.from_numpy(array) for name, array in arrays.items()}, path)
    return path


def read_weights(path: Path, **options: Any) -> dict[str, np.ndarray[Any, Any]]:
    """Every tensor of the file at `path`, read with the registry's reader, copied out."""
    with open_reader(path, **options) as reader:
        return {name: np.array(reader.get(name)) for name in reader.names()}


def read_metadata(path: Path) -> dict[str, str]:
    """The file's metadata pairs."""
    with open_reader(path) as reader:
        return dict(reader.metadata())


class CallsGlobal:
    """Pickles as a call of ``module.name(*args)``, as an exploit would; never unpickle it."""

    def __init__(self, function: Any, *args: object) -> None:
        self.function, self.args = function, args

    def __reduce__(self) -> tuple[Any, tuple[object, ...]]:
        return self.function, self.args


def write_pickle(path: Path, value: object) -> Path:
    """`value` as a plain pickle file (protocol 2), which the PyTorch reader reads as a value."""
    path.write_bytes(pickle.dumps(value, protocol=2))
    return path
