"""Finding the set in a directory: which index or single file, which format and variant, and
what else is there and left out (with the reason each file is ignored)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.sets.test_index import INDEX, split_in_two, tensors, write_hand_set
from weightstore import burnpack, safetensors
from weightstore.cli import main as cli
from weightstore.entry import TensorEntry
from weightstore.errors import SetError, UnsupportedFormatError
from weightstore.sets import find_set, open_set
from weightstore.sets._discover import (
    WHY_OTHER_FORMAT,
    WHY_OTHER_VARIANT,
    WHY_STALE_SINGLE,
    formats_in,
    is_index_name,
)

ONE = [TensorEntry.from_array("w", np.ones(2, np.float32))]


def _touch_safetensors(path: Path) -> None:
    safetensors.write_file(path, ONE)


def test_an_index_is_the_set(tmp_path: Path) -> None:
    index = write_hand_set(tmp_path, split_in_two(tensors()))
    location = find_set(tmp_path)
    assert location.index_path == str(index) and location.single_path is None
    assert location.layout is not None and location.layout.format_name == "safetensors"
    assert location.variant is None and location.ignored == ()
    assert location.shard_files == (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    )


def test_a_single_file_is_the_set_when_there_is_no_index(tmp_path: Path) -> None:
    _touch_safetensors(tmp_path / "model.safetensors")
    location = find_set(tmp_path)
    assert location.single_path == str(tmp_path / "model.safetensors")
    assert location.index_path is None


def test_the_index_wins_over_a_single_file_beside_it(tmp_path: Path) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()))
    _touch_safetensors(tmp_path / "model.safetensors")
    location = find_set(tmp_path)
    assert location.index_path == str(tmp_path / INDEX)
    assert location.ignored == ((str(tmp_path / "model.safetensors"), WHY_STALE_SINGLE),)


def test_an_empty_directory_says_what_it_looked_for(tmp_path: Path) -> None:
    with pytest.raises(SetError) as caught:
        find_set(tmp_path)
    assert caught.value.path == str(tmp_path)
    for name in (INDEX, "model.safetensors", "model.bpk.index.json", "pytorch_model.bin"):
        assert name in caught.value.detail


def test_a_path_that_is_neither_directory_nor_index_is_no_set(tmp_path: Path) -> None:
    _touch_safetensors(tmp_path / "model.safetensors")
    with pytest.raises(SetError, match="neither a directory nor an index"):
        find_set(tmp_path / "model.safetensors")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("model.safetensors.index.json", True),
        ("model.safetensors.index.fp16.json", True),
        ("model.fp16.safetensors.index.json", True),
        ("pytorch_model.bin.index.json", True),
        ("diffusion_pytorch_model.safetensors.index.json", True),
        ("config.json", False),
        ("model.safetensors", False),
        ("index.json", False),
    ],
)
def test_index_names(name: str, expected: bool) -> None:
    assert is_index_name(f"some/dir/{name}") is expected


# -- variants ---------------------------------------------------------------------------------


def _variant_set(directory: Path, variant: str) -> Path:
    shards = {
        f"model.{variant}-00001-of-00002.safetensors": {"a": np.ones(2, np.float16)},
        f"model.{variant}-00002-of-00002.safetensors": {"b": np.ones(2, np.float16)},
    }
    return write_hand_set(directory, shards, index_name=f"model.safetensors.index.{variant}.json")


def test_the_only_variant_is_chosen(tmp_path: Path) -> None:
    index = _variant_set(tmp_path, "fp16")
    location = find_set(tmp_path)
    assert (location.index_path, location.variant) == (str(index), "fp16")
    assert len(location.shard_files) == 2


def test_the_plain_set_is_chosen_over_a_variant_unless_asked(tmp_path: Path) -> None:
    plain = write_hand_set(tmp_path, split_in_two(tensors()))
    variant = _variant_set(tmp_path, "fp16")
    location = find_set(tmp_path)
    assert (location.index_path, location.variant) == (str(plain), None)
    ignored = dict(location.ignored)
    assert ignored[str(variant)] == WHY_OTHER_VARIANT
    assert ignored[str(tmp_path / "model.fp16-00001-of-00002.safetensors")] == WHY_OTHER_VARIANT
    assert len(ignored) == 3
    chosen = find_set(tmp_path, variant="fp16")
    assert (chosen.index_path, chosen.variant) == (str(variant), "fp16")
    assert dict(chosen.ignored)[str(plain)] == WHY_OTHER_VARIANT


def test_several_variants_and_no_plain_set_need_a_choice(tmp_path: Path) -> None:
    _variant_set(tmp_path, "fp16")
    _variant_set(tmp_path, "bf16")
    with pytest.raises(SetError, match=r"several variants \(bf16, fp16\).*variant="):
        find_set(tmp_path)
    assert find_set(tmp_path, variant="bf16").variant == "bf16"


def test_a_variant_not_there_is_no_set(tmp_path: Path) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()))
    with pytest.raises(SetError, match=r"model\.safetensors\.index\.fp16\.json"):
        find_set(tmp_path, variant="fp16")


def test_huggingface_hubs_variant_index_spelling_is_found(tmp_path: Path) -> None:
    # save_torch_state_dict(filename_pattern="model.fp16{suffix}.safetensors") names it so.
    shards = {"model.fp16-00001-of-00001.safetensors": {"a": np.ones(2, np.float16)}}
    index = write_hand_set(tmp_path, shards, index_name="model.fp16.safetensors.index.json")
    location = find_set(tmp_path)
    assert (location.index_path, location.variant) == (str(index), "fp16")


def test_a_variant_single_file(tmp_path: Path) -> None:
    _touch_safetensors(tmp_path / "model.fp16.safetensors")
    location = find_set(tmp_path)
    assert (location.single_path, location.variant) == (
        str(tmp_path / "model.fp16.safetensors"),
        "fp16",
    )


# -- formats ----------------------------------------------------------------------------------


def test_safetensors_comes_first_and_the_other_formats_set_is_reported(tmp_path: Path) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()))
    (tmp_path / "pytorch_model-00001-of-00001.bin").write_bytes(b"\x80\x02}q\x00.")
    (tmp_path / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"w": "pytorch_model-00001-of-00001.bin"}})
    )
    location = find_set(tmp_path)
    assert location.layout is not None and location.layout.format_name == "safetensors"
    assert dict(location.ignored) == {
        str(tmp_path / "pytorch_model-00001-of-00001.bin"): WHY_OTHER_FORMAT,
        str(tmp_path / "pytorch_model.bin.index.json"): WHY_OTHER_FORMAT,
    }
    assert formats_in(str(tmp_path)) == ["safetensors", "pytorch"]
    asked = find_set(tmp_path, "pytorch")
    assert asked.index_path == str(tmp_path / "pytorch_model.bin.index.json")


def test_asking_for_a_format_the_directory_lacks_names_what_is_there(tmp_path: Path) -> None:
    burnpack.write_file(tmp_path / "model.bpk", ONE)
    with pytest.raises(UnsupportedFormatError) as caught:
        find_set(tmp_path, "safetensors")
    assert caught.value.found == "burnpack" and caught.value.path == str(tmp_path)
    assert "model.bpk" in caught.value.detail and "Store.from_file" in caught.value.detail


def test_an_index_opened_by_path_takes_its_layout_from_its_name(tmp_path: Path) -> None:
    shards = {"diffusion_pytorch_model-00001-of-00001.safetensors": {"a": np.ones(2)}}
    name = "diffusion_pytorch_model.safetensors.index.json"
    index = write_hand_set(tmp_path, shards, index_name=name)
    location = find_set(index)
    assert location.index_path == str(index)
    assert location.layout is not None and location.layout.stem == "diffusion_pytorch_model"
    assert location.shard_files == ("diffusion_pytorch_model-00001-of-00001.safetensors",)


# -- entries that are no file -----------------------------------------------------------------


def _odd_neighbours(directory: Path) -> dict[str, str]:
    """An unrelated symlink loop, a broken symlink and (POSIX) a FIFO beside whatever
    `directory` holds: path -> what `SetLocation.skipped` must call it."""
    os.symlink("x", directory / "x")  # x -> x: every stat of it fails with ELOOP
    os.symlink("gone.safetensors", directory / "model-00009-of-00009.safetensors")
    odd = {
        str(directory / "x"): "a symlink loop",
        str(directory / "model-00009-of-00009.safetensors"): "a broken symlink",
    }
    if hasattr(os, "mkfifo"):
        os.mkfifo(directory / "model.safetensors")  # named as a single file; opening it blocks
        odd[str(directory / "model.safetensors")] = "a FIFO"
    (directory / "original").mkdir()  # a plain subdirectory: neither read nor reported
    return odd


def test_entries_that_are_no_file_are_skipped_and_reported(tmp_path: Path) -> None:
    index = write_hand_set(tmp_path, split_in_two(tensors()))
    odd = _odd_neighbours(tmp_path)
    for path in (tmp_path, index):  # the directory, or the index (strays are listed from both)
        location = find_set(path)
        assert location.index_path == str(index) and location.ignored == ()
        assert dict(location.skipped) == odd
        assert location.shard_files == (
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        )
    assert formats_in(str(tmp_path)) == ["safetensors"]
    with open_set(tmp_path) as reader:
        assert reader.names() == sorted(tensors())
        assert dict(reader.report().skipped) == odd


def test_the_command_line_reads_a_set_beside_a_loop_and_lists_what_it_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_hand_set(tmp_path, split_in_two(tensors()))
    odd = _odd_neighbours(tmp_path)
    assert cli(["inspect", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "skipped (not files, never opened):" in text and "  x: a symlink loop" in text
    assert cli(["inspect", "--json", str(tmp_path)]) == 0
    skipped = json.loads(capsys.readouterr().out)["set"]["skipped"]
    assert {entry["file"]: entry["is"] for entry in skipped} == {
        os.path.basename(path): kind for path, kind in odd.items()
    }
    assert cli(["verify", str(tmp_path)]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")
def test_an_entry_that_cannot_be_asked_about_is_skipped_as_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from weightstore.sets import _discover

    index = write_hand_set(tmp_path, split_in_two(tensors()))
    os.mkfifo(tmp_path / "odd")  # not a file by the listing's type: so it is asked about

    def denied(path: str) -> str:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(_discover, "kind_at", denied)
    location = find_set(tmp_path)
    assert location.index_path == str(index)
    assert location.skipped == ((str(tmp_path / "odd"), "unreadable (Permission denied)"),)
