"""Shared test fixtures: where Burn's real files live, skipping cleanly when they do not."""

from __future__ import annotations

from pathlib import Path

import pytest

# ../shared beside the project root; a user's clone has no such folder.
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
BURN_FIXTURES = SHARED / "fixtures" / "burn"


# The folders of shared/fixtures/burn, for the skip reason: one reason per folder, so that
# `pytest -rs` folds every test of a set into one line instead of one line per file.
FIXTURE_SETS = {
    "mnist-inference-web": "an MNIST model saved by Burn",
    "import-model-weights": "an MNIST model saved by torch.save and safetensors",
    "pytorch-tests": "Burn's PyTorch import cases, saved by torch.save",
    "reader": "Burn's PyTorch reader cases (zip, legacy and tar checkpoints)",
    "store": "a PyTorch model whose Burn side uses an enum",
    "safetensors-tests": "Burn's SafeTensors import case",
}


def burn_fixture(relative: str) -> Path:
    """Path of a file under shared/fixtures/burn, or skip the test when it is not there.

    Those files were written by Burn itself and by real PyTorch, not by this project; CI
    supplies them beside the repository (``../shared``), and a clone has none (README.md)."""
    path = BURN_FIXTURES / relative
    if path.exists():
        return path
    folder = relative.split("/", 1)[0]
    if BURN_FIXTURES.is_dir():  # the set is there but lacks this file: name it
        pytest.skip(f"Burn fixture {relative} is not in {BURN_FIXTURES}")
    what = FIXTURE_SETS.get(folder, "files written by Burn")
    pytest.skip(
        f"Burn fixture set {folder}/ ({what}) not here: real files written by Burn and "
        "PyTorch, supplied beside the repository in CI as ../shared/fixtures/burn (README.md)"
    )
