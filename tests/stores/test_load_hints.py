"""The hints of a failed store load name the file's tensors as the file does (issue 23).

A store that renumbers lists (`map_indices_contiguous`, the PyTorch store's default) matches
renumbered names, but its report lists the file's own names and finds its hints on them: a
DataParallel ``module.`` prefix over ``Sequential(Linear, ReLU, Linear)`` is ``module.0`` and
``module.2`` in the file, and renumbered to ``module.1`` it matched no model path, so the prefix
hint vanished and the report named a tensor the file does not have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import LoadFailedError, PytorchStore, SafetensorsStore, load_from, save_into

FIX = '.with_key_remapping(r"^module\\.", "")'
FILE_NAMES = ["module.0.bias", "module.0.weight", "module.2.bias", "module.2.weight"]


def _sequential(torch: Any) -> Any:
    return torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))


def _data_parallel_files(tmp_path: Path) -> tuple[Any, Path, Path]:
    """torch, and a DataParallel Sequential's state dict as a SafeTensors file and a torch
    checkpoint."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    torch.manual_seed(0)
    state = torch.nn.DataParallel(_sequential(torch)).state_dict()
    assert sorted(state) == FILE_NAMES
    safetensors_path, torch_path = tmp_path / "dp.safetensors", tmp_path / "dp.pt"
    save_file({k: v.contiguous() for k, v in state.items()}, safetensors_path)
    torch.save(state, torch_path)
    return torch, safetensors_path, torch_path


@pytest.mark.parametrize("kind", ["pytorch_default", "safetensors_renumbering"])
def test_a_data_parallel_prefix_over_a_renumbered_list_is_still_found(
    tmp_path: Path, kind: str
) -> None:
    torch, safetensors_path, torch_path = _data_parallel_files(tmp_path)
    store: Any = (
        PytorchStore.from_file(torch_path)  # renumbers lists by default
        if kind == "pytorch_default"
        else SafetensorsStore.from_file(safetensors_path).map_indices_contiguous()
    )
    with pytest.raises(LoadFailedError) as caught:
        store.apply_to(_sequential(torch))
    error = caught.value
    assert error.failure == "nothing_loaded"
    assert (
        f"4 of 4 missing tensors are in the source as 'module.' + their name: load with {FIX}"
        in (error.fix)
    )
    assert error.result.unused == FILE_NAMES  # the file's names, not module.1.*
    summary = str(error.result)
    assert f"💡 Fix: add {FIX} to the store" in summary
    assert "Did you mean: 'module.2.weight'?" in summary
    assert "module.1." not in summary
    result = store.with_key_remapping(r"^module\.", "").apply_to(_sequential(torch))
    assert result.is_success() and len(result.applied) == 4  # and the fix loads it


def test_a_partial_load_reports_unused_tensors_under_the_files_names() -> None:
    arrays = {
        "0.weight": np.ones((3, 2), np.float32),
        "0.bias": np.ones(3, np.float32),
        "2.weight": np.ones((1, 3), np.float32),
        "head.3.weight": np.ones(2, np.float32),  # no model path: renumbered it is head.0
    }
    saved = SafetensorsStore.from_bytes()
    save_into(arrays, saved)
    store = SafetensorsStore.from_bytes(saved.get_bytes()).map_indices_contiguous()
    model = {
        "0": {"weight": np.zeros((3, 2), np.float32), "bias": np.zeros(3, np.float32)},
        "2": {"weight": np.zeros((1, 3), np.float32), "bias": np.zeros(1, np.float32)},
    }
    result = load_from(model, store.allow_partial())
    assert result.applied == ["0.weight", "0.bias", "2.weight"]
    assert result.missing == [("2.bias", "dict")]
    assert result.unused == ["head.3.weight"]
    assert "head.0" not in str(result)
