"""Split GGUF models (llama.cpp's gguf-split, gguf-py's writer with split_max_tensors) open as
one reader by any part, equal to the unsplit model, and every way the parts can fail to make
one model is a typed error naming the file at fault. (By directory: test_split_directory.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.gguf._split_files import (
    I32,
    NAMES,
    TENSORS,
    U16,
    U32,
    gguf_py,
    part,
    write_parts,
    write_with_gguf_py,
)
from weightstore import open_reader
from weightstore.entry import TensorEntry
from weightstore.errors import (
    DigestMismatchError,
    FileMissingError,
    MetadataError,
    SetError,
    SplitPartMissingError,
    TensorNotFoundError,
)
from weightstore.gguf import GgufReader, GgufSplitReader, GgufValue, GgufWriter, open_gguf
from weightstore.gguf._layout import ValueType
from weightstore.gguf._names import parse_part_name, part_path


@pytest.fixture
def gguf_py_split(tmp_path: Path) -> Path:
    """A directory holding the model as gguf-py splits it: three parts of at most two tensors."""
    write_with_gguf_py(tmp_path / "tiny.gguf", split_max_tensors=2)
    return tmp_path


def _values(reader: GgufSplitReader) -> dict[str, np.ndarray[Any, Any]]:
    return {name: np.array(reader.get(name)) for name in reader.names()}


# -- split by gguf-py, read as one ------------------------------------------------------------


def test_gguf_py_parts_are_named_and_keyed_as_the_reader_expects(gguf_py_split: Path) -> None:
    gguf = gguf_py()
    names = sorted(os.listdir(gguf_py_split))
    assert names == [f"tiny-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    keys = gguf.constants.Keys.Split
    with GgufReader.from_file(gguf_py_split / names[1]) as part:
        assert part.metadata_type(keys.LLM_KV_SPLIT_NO) == "uint16"
        assert part.metadata_type(keys.LLM_KV_SPLIT_COUNT) == "uint16"
        assert part.metadata_type(keys.LLM_KV_SPLIT_TENSORS_COUNT) == "int32"


@pytest.mark.parametrize("number", [1, 2, 3])
def test_any_part_opens_the_whole_model_equal_to_the_unsplit_file(
    gguf_py_split: Path, tmp_path_factory: pytest.TempPathFactory, number: int
) -> None:
    whole = tmp_path_factory.mktemp("whole") / "tiny.gguf"
    write_with_gguf_py(whole)
    with (
        open_gguf(whole) as unsplit,
        open_gguf(part(gguf_py_split, number, prefix="tiny")) as model,
    ):
        assert isinstance(unsplit, GgufReader) and isinstance(model, GgufSplitReader)
        assert model.names() == unsplit.names() == NAMES
        assert model.names_in_file_order() == NAMES
        assert model.tensor_infos() == unsplit.tensor_infos()
        values = _values(model)
        for name, expected in TENSORS.items():
            np.testing.assert_array_equal(values[name], expected)
            assert values[name].dtype == expected.dtype
            np.testing.assert_array_equal(model.get_raw(name), unsplit.get_raw(name))
            assert model.descriptor(name).shape == unsplit.descriptor(name).shape
            assert model.ggml_type(name) is unsplit.ggml_type(name)
        # The model's metadata is the unsplit file's: part 1's, less the parts' split pairs.
        assert model.metadata_keys() == unsplit.metadata_keys()
        assert model.metadata() == unsplit.metadata()
        assert model.metadata_typed() == unsplit.metadata_typed()
        assert model.metadata_value("general.name") == GgufValue(ValueType.STRING, "tiny")
        assert model.metadata_type("general.name") == "string"
        assert model.metadata_length("general.name") is None
        for key in ("split.no", "split.count", "split.tensors.count"):
            with pytest.raises(KeyError):
                model.metadata_value(key)
            with pytest.raises(KeyError):
                model.metadata_type(key)
            assert key in model.part_readers[0].metadata_keys()
        assert model.path == str(part(gguf_py_split, 1, prefix="tiny"))
        assert model.parts == tuple(str(part(gguf_py_split, n, prefix="tiny")) for n in (1, 2, 3))


def test_a_small_first_part_holding_only_metadata_opens(tmp_path: Path) -> None:
    """gguf-py's small_first_shard: part 1 holds the metadata and no tensor."""
    write_with_gguf_py(tmp_path / "tiny.gguf", split_max_tensors=3, small_first_shard=True)
    with open_gguf(part(tmp_path, 3, prefix="tiny")) as model:
        assert isinstance(model, GgufSplitReader)
        assert model.part_readers[0].names() == []
        assert model.names() == NAMES
        assert model.metadata()["general.name"] == "tiny"


def test_a_split_by_size_opens(tmp_path: Path) -> None:
    write_with_gguf_py(tmp_path / "tiny.gguf", split_max_size=100)
    parts = sorted(os.listdir(tmp_path))
    assert len(parts) > 2
    with open_reader(tmp_path / parts[-1]) as model:
        assert isinstance(model, GgufSplitReader) and len(model.parts) == len(parts)
        for name, expected in TENSORS.items():
            np.testing.assert_array_equal(model.get(name), expected)


# -- opening by a part ------------------------------------------------------------------------


def test_a_plain_file_opens_as_today(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    GgufWriter([TensorEntry.from_array("w", TENSORS["output.weight"])]).save(path)
    with open_gguf(path) as reader:
        assert type(reader) is GgufReader


@pytest.mark.parametrize("count", [0, 1])
def test_a_part_named_file_whose_split_count_is_0_or_1_is_one_file(
    tmp_path: Path, count: int
) -> None:
    """gguf-split --merge writes split.count 0 into the merged file; a one-part split says 1."""
    path = part(tmp_path, 1, 1)
    metadata = {"split.no": GgufValue(U16, 0), "split.count": GgufValue(U16, count)}
    GgufWriter([TensorEntry.from_array("w", TENSORS["output.weight"])], metadata).save(path)
    with open_gguf(path) as reader:
        assert type(reader) is GgufReader and reader.names() == ["w"]


def test_hand_written_parts_open_by_each_part(tmp_path: Path) -> None:
    paths = write_parts(tmp_path)
    for path in paths:
        with open_reader(path) as model:
            assert isinstance(model, GgufSplitReader)
            assert model.names() == NAMES and len(model) == 5 and list(model) == NAMES
            assert "output.weight" in model and "nothing" not in model and 3 not in model
            assert model.part_of("blk.1.ffn_up.weight") == str(paths[1])
            assert model.metadata()["general.name"] == "tiny"


def test_options_reach_every_part(tmp_path: Path) -> None:
    paths = write_parts(tmp_path)
    with open_gguf(os.fspath(paths[1]), mode="pread") as model:
        assert isinstance(model, GgufSplitReader)
        assert {type(part._source).__name__ for part in model.part_readers} == {"PreadSource"}
        np.testing.assert_array_equal(model.get("token_embd.weight"), TENSORS["token_embd.weight"])


def test_slices_and_raw_bytes_come_from_the_part_holding_the_tensor(tmp_path: Path) -> None:
    write_parts(tmp_path)
    with open_gguf(part(tmp_path, 2)) as model:
        name = "blk.1.ffn_up.weight"
        np.testing.assert_array_equal(model.get_slice(name)[1:, ::2], TENSORS[name][1:, ::2])
        assert bytes(model.get_bytes(name)) == TENSORS[name].tobytes()
        assert model.get_raw(name).dtype == np.uint8
        model.plan_reads(NAMES)  # local parts: nothing to fetch, nothing fails


def test_closing_closes_every_part(tmp_path: Path) -> None:
    write_parts(tmp_path)
    with open_gguf(part(tmp_path, 1)) as model:
        assert isinstance(model, GgufSplitReader)
        assert not any(part._source._closed for part in model.part_readers)  # type: ignore[attr-defined]
    assert all(part._source._closed for part in model.part_readers)  # type: ignore[attr-defined]


def test_an_unknown_name_is_tensor_not_found(tmp_path: Path) -> None:
    write_parts(tmp_path)
    with open_gguf(part(tmp_path, 1)) as model, pytest.raises(TensorNotFoundError) as caught:
        model.get("blk.9.attn_q.weight")
    assert caught.value.path == str(part(tmp_path, 1))


def test_digests_are_checked_in_the_part_that_carries_them(tmp_path: Path) -> None:
    paths = write_parts(tmp_path, digests=True)
    with open_gguf(paths[0]) as model:
        assert model.verify_digests() == []
        assert model.verify_digests(["output.weight", "absent"]) == ["absent"]
    name = "blk.1.ffn_up.weight"  # in part 2: flip one byte of its data
    with GgufReader.from_file(paths[1]) as part:
        start = part.data_start + part.descriptor(name).data_offsets[0]
    data = bytearray(paths[1].read_bytes())
    data[start] ^= 0xFF
    paths[1].write_bytes(bytes(data))
    with open_gguf(paths[0]) as model, pytest.raises(DigestMismatchError) as caught:
        model.verify_digests()
    assert caught.value.tensor == name and caught.value.path == str(paths[1])
    with open_gguf(paths[0]) as model:
        model.check_digests(False)
        assert model.verify_digests() == sorted(NAMES)


# -- the parts do not make one model -----------------------------------------------------------


@pytest.mark.parametrize(("missing", "opened"), [(2, 1), (2, 3), (1, 3), (3, 1)])
def test_a_missing_part_is_named(tmp_path: Path, missing: int, opened: int) -> None:
    paths = write_parts(tmp_path)
    paths[missing - 1].unlink()
    with pytest.raises(SplitPartMissingError) as caught:
        open_gguf(paths[opened - 1])
    error = caught.value
    assert isinstance(error, FileMissingError) and isinstance(error, FileNotFoundError)
    assert error.path == error.filename == str(paths[missing - 1])
    assert (error.part, error.count, error.opened) == (missing, 3, str(paths[opened - 1]))
    assert f"part {missing} of the 3 parts" in str(error)


def test_a_part_with_another_count_is_refused(tmp_path: Path) -> None:
    paths = write_parts(tmp_path, changed={3: {"split.count": GgufValue(U16, 4)}})
    with pytest.raises(SetError, match=r"4 parts") as caught:
        open_gguf(paths[0])
    assert caught.value.shard == str(paths[2]) and caught.value.path == str(paths[0])


def test_a_part_whose_split_no_is_not_its_name_is_refused(tmp_path: Path) -> None:
    paths = write_parts(tmp_path, changed={2: {"split.no": GgufValue(U16, 2)}})
    with pytest.raises(SetError, match=r"split\.no 2, but its name makes it part 2") as caught:
        open_gguf(paths[0])
    assert caught.value.shard == str(paths[1])
    with pytest.raises(SetError, match=r"split\.no 2"):  # the opened part is checked first
        open_gguf(paths[1])


def test_a_part_of_no_split_is_refused(tmp_path: Path) -> None:
    paths = write_parts(tmp_path, dropped={2: ["split.count", "split.no"]})
    with pytest.raises(SetError, match=r"no split\.count") as caught:
        open_gguf(paths[0])
    assert caught.value.shard == str(paths[1])


def test_a_part_without_split_no_is_refused(tmp_path: Path) -> None:
    paths = write_parts(tmp_path, dropped={3: ["split.no"]})
    with pytest.raises(SetError, match=r"no split\.no") as caught:
        open_gguf(paths[0])
    assert caught.value.shard == str(paths[2])


@pytest.mark.parametrize("part", [1, 3])
def test_a_tensor_total_that_is_not_split_tensors_count_is_refused(
    tmp_path: Path, part: int
) -> None:
    paths = write_parts(tmp_path, changed={part: {"split.tensors.count": GgufValue(I32, 6)}})
    with pytest.raises(SetError, match=r"6 tensors .* parts hold 5") as caught:
        open_gguf(paths[1])
    assert caught.value.shard == str(paths[part - 1])


def test_a_tensor_in_two_parts_is_refused(tmp_path: Path) -> None:
    groups = [NAMES[:2], NAMES[1:3]]  # "blk.0.attn_q.weight" in both
    paths = write_parts(tmp_path, groups, changed={1: {"split.tensors.count": GgufValue(I32, 3)}})
    with pytest.raises(SetError, match=r"in two parts") as caught:
        open_gguf(paths[0])
    assert caught.value.tensor == NAMES[1] and caught.value.shard == str(paths[1])


def test_a_split_part_not_named_as_one_is_refused(tmp_path: Path) -> None:
    paths = write_parts(tmp_path)
    renamed = paths[0].rename(tmp_path / "model.gguf")
    with pytest.raises(SetError, match=r"-NNNNN-of-00003\.gguf") as caught:
        open_gguf(renamed)
    assert caught.value.path == str(renamed)


def test_a_name_counting_other_parts_than_split_count_is_refused(tmp_path: Path) -> None:
    paths = write_parts(tmp_path)
    renamed = paths[0].rename(part(tmp_path, 1, 4))
    with pytest.raises(SetError, match=r"name says the model has 4 parts"):
        open_gguf(renamed)


def test_split_pairs_that_are_not_integers_are_metadata_errors(tmp_path: Path) -> None:
    paths = write_parts(tmp_path / "string", changed={1: {"split.count": "3"}})
    with pytest.raises(MetadataError, match=r"split\.count is a string"):
        open_gguf(paths[0])
    paths = write_parts(tmp_path / "float", changed={2: {"split.no": 1.0}})
    with pytest.raises(MetadataError, match=r"split\.no is a float32") as caught:
        open_gguf(paths[0])
    assert caught.value.path == str(paths[1])


def test_the_part_count_is_a_uint16(tmp_path: Path) -> None:
    """65,535 parts is a count (its part 2 is then missing); 65,536 no uint16 holds."""
    entries = [TensorEntry.from_array("w", TENSORS["output.weight"])]
    for count, raised in [(65_535, SplitPartMissingError), (65_536, MetadataError)]:
        path = part(tmp_path, 1, count)
        metadata = {"split.no": GgufValue(U16, 0), "split.count": GgufValue(U32, count)}
        GgufWriter(entries, metadata).save(path)
        with pytest.raises(raised):
            open_gguf(path)


def test_nothing_stays_open_when_a_later_part_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = write_parts(tmp_path, changed={3: {"split.count": GgufValue(U16, 4)}})
    opened: list[GgufReader] = []
    original = GgufReader.from_file

    def recording(path: Any, **options: Any) -> GgufReader:
        reader = original(path, **options)
        opened.append(reader)
        return reader

    monkeypatch.setattr(GgufReader, "from_file", recording)
    with pytest.raises(SetError):
        open_gguf(paths[1])
    assert len(opened) == 3
    assert all(reader._source._closed for reader in opened)  # type: ignore[attr-defined]


# -- names -----------------------------------------------------------------------------------


def test_part_names_follow_llama_cpp() -> None:
    assert part_path("/m/x-00001-of-00003.gguf", "x", 2, 3) == "/m/x-00002-of-00003.gguf"
    assert part_path("s3://b/m/x.gguf", "x", 3, 3) == "s3://b/m/x-00003-of-00003.gguf"
    assert part_path("x.gguf", "a-b", 7, 123_456) == "a-b-00007-of-123456.gguf"
    name = parse_part_name("Qwen-7B-Q4_K_M-00002-of-00004.gguf")
    assert name is not None and (name.prefix, name.number, name.count) == ("Qwen-7B-Q4_K_M", 2, 4)
    for other in ("x-00000-of-00003.gguf", "x-00004-of-00003.gguf", "x-0001-of-0003.gguf",
                  "x-00001-of-00003.safetensors", "x.gguf"):  # fmt: skip
        assert parse_part_name(other) is None


# -- the model copied into one file --------------------------------------------------------------


def test_a_split_model_converted_into_one_file_is_one_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copy carries the model's metadata, not part 1's split pairs: else it would say it
    is part 1 of 3, and opening it would look for parts that are not there."""
    from weightstore.cli import main

    paths = write_parts(tmp_path / "parts")
    target = tmp_path / "whole.gguf"
    assert main(["convert", str(paths[1]), str(target)]) == 0, capsys.readouterr()
    with open_gguf(target) as whole:
        assert type(whole) is GgufReader
        assert whole.metadata() == {"general.architecture": "llama", "general.name": "tiny"}
        assert sorted(whole.names()) == sorted(NAMES)
        for name, expected in TENSORS.items():
            np.testing.assert_array_equal(whole.get(name), expected)


def test_a_split_model_at_urls_opens_by_a_part(tmp_path: Path) -> None:
    """Parts at URLs are found as on disk: beside the opened part's URL, by name."""
    fsspec = need("fsspec")
    memory = fsspec.filesystem("memory")
    paths = write_parts(tmp_path)
    folder = f"/gguf-split-{os.getpid()}-{tmp_path.name}"
    for path in paths:
        memory.pipe(f"{folder}/{path.name}", path.read_bytes())
    try:
        url = f"memory://{folder}/{paths[1].name}"
        with open_reader(url) as model:
            assert isinstance(model, GgufSplitReader) and model.names() == NAMES
            assert model.parts == tuple(f"memory://{folder}/{path.name}" for path in paths)
            np.testing.assert_array_equal(model.get("output.weight"), TENSORS["output.weight"])
        memory.rm(f"{folder}/{paths[2].name}")
        with pytest.raises(SplitPartMissingError) as caught:
            open_gguf(url)
        assert caught.value.path == f"memory://{folder}/{paths[2].name}"
    finally:
        memory.rm(folder, recursive=True)
