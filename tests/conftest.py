"""Shared test fixtures: where Burn's real files live, skipping cleanly when they do not."""

from __future__ import annotations

from pathlib import Path

import pytest

# ../shared beside the project root; a user's clone has no such folder.
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
BURN_FIXTURES = SHARED / "fixtures" / "burn"


def burn_fixture(relative: str) -> Path:
    """Path of a file under shared/fixtures/burn, or skip the test when it is not there."""
    path = BURN_FIXTURES / relative
    if not path.exists():
        pytest.skip(f"fixture {relative} not present (no ../shared folder)")
    return path
