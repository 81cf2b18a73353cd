"""A directory holding one GGUF model (a file, or a split model's parts) opens as that model
through `locate`, `open_reader`, the stores and ``inspect``; one holding several is a typed
error listing them, and a directory holding a set reads as before."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.gguf._split_files import NAMES, TENSORS, part, write_parts, write_with_gguf_py
from weightstore import open_reader
from weightstore.container._format import ContainerFormat
from weightstore.entry import TensorEntry
from weightstore.errors import SetError, SplitPartMissingError
from weightstore.gguf import FORMAT, GgufReader, GgufSplitReader, GgufWriter
from weightstore.gguf._names import model_in_directory
from weightstore.locate import Kind, locate


@pytest.fixture
def gguf_py_split(tmp_path: Path) -> Path:
    """A directory holding the model as gguf-py splits it: three parts of at most two tensors."""
    write_with_gguf_py(tmp_path / "tiny.gguf", split_max_tensors=2)
    return tmp_path


def test_the_directory_opens_as_the_model_through_locate_and_open_reader(
    gguf_py_split: Path,
) -> None:
    location = locate(gguf_py_split)
    assert location.kind is Kind.FILE and location.format is FORMAT
    assert location.path == str(part(gguf_py_split, 1, prefix="tiny"))
    with open_reader(gguf_py_split) as model:
        assert isinstance(model, GgufSplitReader) and model.names() == NAMES
        np.testing.assert_array_equal(model.get("output.weight"), TENSORS["output.weight"])


def test_a_directory_holding_one_plain_gguf_file_opens_it(tmp_path: Path) -> None:
    GgufWriter([TensorEntry.from_array("w", TENSORS["output.weight"])]).save(tmp_path / "m.gguf")
    (tmp_path / "README.md").write_text("not a model")
    assert locate(tmp_path).path == str(tmp_path / "m.gguf")
    with open_reader(tmp_path) as reader:
        assert isinstance(reader, GgufReader) and reader.names() == ["w"]


def test_a_directory_of_hand_written_parts_opens_with_other_files_beside(tmp_path: Path) -> None:
    paths = write_parts(tmp_path)
    (tmp_path / "README.md").write_text("a model card")
    (tmp_path / "config.json").write_text("{}")
    with open_reader(tmp_path) as model:
        assert isinstance(model, GgufSplitReader) and model.names() == NAMES
        assert model.parts == tuple(str(path) for path in paths)


def test_a_directory_missing_its_first_part_names_it(tmp_path: Path) -> None:
    paths = write_parts(tmp_path)
    paths[0].unlink()
    with pytest.raises(SplitPartMissingError) as caught:
        open_reader(tmp_path)
    assert caught.value.path == str(paths[0])


def test_a_directory_of_unrelated_gguf_files_lists_them(tmp_path: Path) -> None:
    entries = [TensorEntry.from_array("w", TENSORS["output.weight"])]
    GgufWriter(entries).save(tmp_path / "tiny-Q8_0.gguf")
    GgufWriter(entries).save(tmp_path / "mmproj-tiny-f16.gguf")
    write_parts(tmp_path)
    with pytest.raises(SetError) as caught:
        open_reader(tmp_path)
    message = str(caught.value)
    assert caught.value.path == str(tmp_path)
    assert "holds 3 GGUF models" in message
    for shown in ("mmproj-tiny-f16.gguf", "model-00001-of-00003.gguf (3 parts", "tiny-Q8_0.gguf"):
        assert shown in message
    with pytest.raises(SetError):
        locate(tmp_path)


def test_two_split_models_in_one_directory_are_two_models(tmp_path: Path) -> None:
    write_parts(tmp_path, prefix="a")
    write_parts(tmp_path, [NAMES[:3], NAMES[3:]], prefix="b")
    with pytest.raises(SetError, match=r"holds 2 GGUF models"):
        model_in_directory(str(tmp_path))


def test_a_directory_lists_only_regular_gguf_files(tmp_path: Path) -> None:
    paths = write_parts(tmp_path)
    (tmp_path / "sub.gguf").mkdir()
    (tmp_path / "broken.gguf").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "pipe.gguf")
    assert model_in_directory(str(tmp_path)) == str(paths[0])
    assert model_in_directory(str(tmp_path / "absent")) is None


def test_a_set_in_the_directory_wins_over_gguf_files(tmp_path: Path) -> None:
    """A directory already read as a set reads as it did: GGUF files are looked for only in a
    directory holding no set."""
    from weightstore import safetensors

    safetensors.write_file(
        tmp_path / "model.safetensors", [TensorEntry.from_array("w", TENSORS["output.weight"])]
    )
    write_parts(tmp_path)
    assert locate(tmp_path).kind is Kind.SET


def test_a_declared_store_of_another_format_does_not_take_gguf_files(tmp_path: Path) -> None:
    from weightstore import safetensors
    from weightstore.locate import _locate

    write_parts(tmp_path)
    location, _ = _locate(str(tmp_path), None, None, keep=False, known=safetensors.FORMAT)
    assert location.kind is Kind.MISSING


def test_the_record_names_the_directory_rule() -> None:
    assert FORMAT.find_in_directory is not None
    assert isinstance(FORMAT, ContainerFormat)


def test_inspect_describes_a_directory_by_the_model_found_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summarizer is handed part 1, not the directory (it opens one model file)."""
    from weightstore.cli import _report

    write_parts(tmp_path)
    seen: list[str] = []
    monkeypatch.setattr(
        ContainerFormat, "load_summarizer", lambda fmt: lambda path, options: seen.append(path)
    )
    _report.summarize(tmp_path)
    assert seen == [str(part(tmp_path, 1))]


def test_a_store_lists_the_whole_model(tmp_path: Path) -> None:
    from weightstore import Store
    from weightstore.stores import GgufStore

    write_parts(tmp_path)
    for path in (tmp_path, part(tmp_path, 2)):
        for store in (Store.from_file(path), GgufStore.from_file(path)):
            assert type(store) is GgufStore
            assert sorted(store.keys()) == sorted(NAMES)
            assert store.read_metadata() == {
                "general.architecture": "llama",
                "general.name": "tiny",
            }


def test_verify_reads_the_model_a_directory_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from weightstore.cli import main

    paths = write_parts(tmp_path)
    assert main(["verify", str(tmp_path)]) == 0
    assert "gguf, 5 tensors" in capsys.readouterr().out
    paths[1].unlink()
    assert main(["verify", str(tmp_path)]) != 0
    assert os.path.basename(paths[1]) in capsys.readouterr().out


@pytest.mark.parametrize("which", ["directory", "part 3"])
def test_inspect_lists_every_part_and_tensor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    import json

    from weightstore.cli import main

    paths = write_parts(tmp_path)
    target = tmp_path if which == "directory" else paths[2]
    assert main(["inspect", "--json", str(target)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in report["tensors"]] == NAMES
    shards = report["set"]["shards"]
    assert [shard["file"] for shard in shards] == [path.name for path in paths]
    assert [shard["tensors"] for shard in shards] == [2, 2, 1]
    assert report["file_size"] == sum(path.stat().st_size for path in paths)
    assert report["metadata"] == {"general.architecture": "llama", "general.name": "tiny"}
    assert main(["inspect", str(target)]) == 0
    text = capsys.readouterr().out
    assert "3 shards" in text and f"{paths[1].name}:" in text
