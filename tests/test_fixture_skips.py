"""Without Burn's fixture files (a clone has no ``../shared``), their tests skip with one
reason per fixture set, which says what the files are: ``pytest -rs`` then folds a set's
dozens of skips into one line instead of one unexplained line per file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import conftest


def _reason(relative: str) -> str:
    with pytest.raises(pytest.skip.Exception) as caught:
        conftest.burn_fixture(relative)
    return str(caught.value)


def test_one_reason_per_fixture_set_saying_what_the_files_are(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(conftest, "BURN_FIXTURES", tmp_path / "shared" / "fixtures" / "burn")
    first, second = _reason("reader/float32.pt"), _reason("reader/broken.pt")
    other = _reason("pytorch-tests/linear/linear.pt")
    assert first == second != other
    assert "reader/" in first and "pytorch-tests/" in other
    assert "written by Burn" in first and "../shared/fixtures/burn" in first


def test_a_file_missing_from_a_present_set_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(conftest, "BURN_FIXTURES", tmp_path)
    assert "reader/gone.pt" in _reason("reader/gone.pt")


def test_every_fixture_folder_has_a_description() -> None:
    if not conftest.BURN_FIXTURES.is_dir():
        pytest.skip("no ../shared/fixtures/burn to compare with")
    folders = {p.name for p in conftest.BURN_FIXTURES.iterdir() if p.is_dir()}
    assert folders <= set(conftest.FIXTURE_SETS)
