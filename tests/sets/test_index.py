"""A set's index read as hostile input: size bounded before reading, JSON shape checked,
duplicate keys and deep nesting refused, shard names confined to the directory.

`write_hand_set` (used by the other set tests) builds a set file by file, so each test can
break exactly one rule.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore import safetensors
from weightstore.entry import TensorEntry
from weightstore.errors import LimitExceeded, SetError
from weightstore.sets import MAX_INDEX_SIZE, SET_ID_KEY, read_index
from weightstore.sets._index import MAX_INDEX_DEPTH, locate_shards, parse_index

INDEX = "model.safetensors.index.json"


def tensors(seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    """Four small float32 tensors; `seed` gives each set its own values."""
    rng = np.random.default_rng(seed)
    return {f"layers.{i}.weight": rng.standard_normal((4, 3)).astype(np.float32) for i in range(4)}


def write_hand_set(
    directory: Path,
    shards: Mapping[str, Mapping[str, np.ndarray[Any, Any]]],
    *,
    weight_map: Mapping[str, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    shard_metadata: Mapping[str, str] | None = None,
    index_name: str = INDEX,
) -> Path:
    """Write SafeTensors `shards` (file name -> tensors) and an index into `directory`.

    The index's weight map is `weight_map`, or else each tensor to the shard holding it;
    every shard carries `shard_metadata`. Returns the index path."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, held in shards.items():
        entries = [TensorEntry.from_array(tensor, array) for tensor, array in held.items()]
        safetensors.write_file(directory / name, entries, dict(shard_metadata or {}))
    if weight_map is None:
        weight_map = {tensor: name for name, held in shards.items() for tensor in held}
    index = directory / index_name
    total = sum(a.nbytes for held in shards.values() for a in held.values())
    index.write_text(
        json.dumps(
            {"metadata": {"total_size": total, **(metadata or {})}, "weight_map": weight_map}
        )
    )
    return index


def split_in_two(values: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, dict[str, Any]]:
    """`values` as two HF-named shards, the first two tensors in shard 1."""
    names = sorted(values)
    return {
        "model-00001-of-00002.safetensors": {n: values[n] for n in names[:2]},
        "model-00002-of-00002.safetensors": {n: values[n] for n in names[2:]},
    }


def _index_bytes(weight_map: object, **top: object) -> bytes:
    return json.dumps({"metadata": {"total_size": 48}, "weight_map": weight_map, **top}).encode()


# -- a good index -----------------------------------------------------------------------------


def test_an_index_reads_as_its_weight_map_and_string_metadata(tmp_path: Path) -> None:
    index = write_hand_set(
        tmp_path, split_in_two(tensors()), metadata={"format": "pt", "nested": {"a": [1, 2]}}
    )
    parsed = read_index(index)
    assert parsed.path == str(index) and parsed.directory == str(tmp_path)
    assert parsed.weight_map == {
        "layers.0.weight": "model-00001-of-00002.safetensors",
        "layers.1.weight": "model-00001-of-00002.safetensors",
        "layers.2.weight": "model-00002-of-00002.safetensors",
        "layers.3.weight": "model-00002-of-00002.safetensors",
    }
    assert parsed.metadata == {"total_size": "192", "format": "pt", "nested": '{"a":[1,2]}'}
    assert parsed.set_id is None  # a Hugging Face index carries none
    assert parsed.shard_names() == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]


def test_a_weightstore_index_carries_its_set_id() -> None:
    data = json.dumps({"metadata": {SET_ID_KEY: "0123456789abcdef" * 2}, "weight_map": {}})
    assert parse_index(data.encode(), "i.json").set_id == "0123456789abcdef" * 2


def test_metadata_may_be_absent_or_null() -> None:
    assert parse_index(b'{"weight_map": {}}', "i.json").metadata == {}
    assert parse_index(b'{"metadata": null, "weight_map": {}}', "i.json").metadata == {}


# -- size, bytes and JSON ---------------------------------------------------------------------


def test_an_index_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    index = tmp_path / INDEX
    index.write_bytes(b" " * 1000)  # not even JSON: the size check comes first
    with pytest.raises(LimitExceeded) as caught:
        read_index(index, max_index_size=999)
    assert (caught.value.found, caught.value.limit, caught.value.path) == (1000, 999, str(index))
    assert MAX_INDEX_SIZE == 64 * 2**20


def test_the_largest_real_set_index_is_far_inside_the_limits(tmp_path: Path) -> None:
    # 1,000 shards of 100 tensors each, named as a large transformer's are: the size and depth
    # limits are there for hostile indexes and must cost a real one nothing.
    weight_map = {
        f"model.layers.{i // 10}.block_sparse_moe.experts.{i % 10}.w{j}.weight": (
            f"model-{i % 1000 + 1:05d}-of-01000.safetensors"
        )
        for i in range(10_000)
        for j in range(10)
    }
    data = json.dumps({"metadata": {"total_size": 2**44}, "weight_map": weight_map}, indent=2)
    index = tmp_path / INDEX
    index.write_text(data)
    assert index.stat().st_size * 4 < MAX_INDEX_SIZE  # about 9 MB of 64 MiB
    parsed = read_index(index)
    assert len(parsed.weight_map) == 100_000 and len(parsed.shard_names()) == 1000
    assert MAX_INDEX_DEPTH > 3  # a valid index nests 3 levels


def test_the_limit_can_be_raised_for_a_trusted_index(tmp_path: Path) -> None:
    index = tmp_path / INDEX
    index.write_bytes(_index_bytes({"w": "a.safetensors"}) + b" " * 2000)
    assert read_index(index, max_index_size=4000).weight_map == {"w": "a.safetensors"}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"weight_map": {"w": "\xff.safetensors"}}', "not UTF-8"),
        (b'{"weight_map": {"w": "a.safetensors"}', "not valid JSON"),
        (b"", "not valid JSON"),
        (b'{"weight_map": {}, "metadata": {"n": 1' + b"0" * 5000 + b"}}", "not valid JSON"),
        (b'{"weight_map": {}, "metadata": {"total_size": NaN}}', "not valid JSON"),
    ],
    ids=["not-utf8", "truncated", "empty", "huge-int", "nan-literal"],
)
def test_bytes_that_are_not_json_are_a_set_error(data: bytes, expected: str) -> None:
    with pytest.raises(SetError, match=expected) as caught:
        parse_index(data, "i.json")
    assert caught.value.path == "i.json"


@pytest.mark.parametrize(
    "data",
    [
        b'{"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}}',
        b'{"weight_map": {}, "weight_map": {"w": "a.safetensors"}}',
        b'{"weight_map": {}, "metadata": {"k": "1", "k": "2"}}',
    ],
    ids=["tensor", "top-level", "metadata"],
)
def test_a_key_given_twice_is_refused(data: bytes) -> None:
    # json keeps the last value: a tensor listed twice would load from whichever came last.
    with pytest.raises(SetError, match="gives this key twice"):
        parse_index(data, "i.json")


def test_a_tensor_claimed_by_two_shards_names_both() -> None:
    data = b'{"weight_map": {"w": "a.safetensors", "v": "a.safetensors", "w": "b.safetensors"}}'
    with pytest.raises(SetError) as caught:
        parse_index(data, "i.json")
    assert caught.value.tensor == "w"
    assert "'a.safetensors', then 'b.safetensors'" in caught.value.detail


def test_nesting_past_the_parser_is_a_set_error_not_a_crash() -> None:
    data = b'{"weight_map": {}, "metadata": {"x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}"
    with pytest.raises(SetError, match="nests deeper"):
        parse_index(data, "i.json")


def test_nesting_over_the_depth_limit_is_refused() -> None:
    deep = b"[" * MAX_INDEX_DEPTH + b"]" * MAX_INDEX_DEPTH
    with pytest.raises(SetError, match=f"over the limit of {MAX_INDEX_DEPTH}"):
        parse_index(b'{"weight_map": {}, "metadata": {"x": ' + deep + b"}}", "i.json")


# -- shape ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'["weight_map"]', "index is a JSON array, not an object"),
        (b'{"metadata": {}}', '"weight_map" is missing'),
        (b'{"weight_map": ["a.safetensors"]}', '"weight_map" is a JSON array'),
        (b'{"weight_map": {"w": 3}}', "shard is a JSON number"),
        (b'{"weight_map": {"w": null}}', "shard is a JSON null"),
        (b'{"weight_map": {}, "metadata": ["x"]}', '"metadata" is a JSON array'),
        (b'{"weight_map": {}, "metadata": {"weightstore.set_id": "ABC"}}', "not 32 lowercase"),
    ],
    ids=["array", "no-map", "map-array", "shard-int", "shard-null", "metadata-array", "set-id"],
)
def test_the_shape_is_checked(data: bytes, expected: str) -> None:
    with pytest.raises(SetError, match=expected):
        parse_index(data, "i.json")


def test_the_tensor_whose_shard_is_bad_is_named() -> None:
    with pytest.raises(SetError) as caught:
        parse_index(b'{"weight_map": {"ok": "a.safetensors", "bad": 1}}', "i.json")
    assert caught.value.tensor == "bad"


# -- shard names ------------------------------------------------------------------------------

HOSTILE_NAMES = {
    "empty": ("", "is empty"),
    "absolute": ("/etc/passwd", "is an absolute path"),
    "parent": ("../model-00001-of-00002.safetensors", "leaves the directory"),
    "parent-inside": ("sub/../../x.safetensors", "leaves the directory"),
    "drive": ("C:model.safetensors", "drive letter"),
    "drive-backslash": ("C:\\Windows\\x.safetensors", "backslash"),
    "backslash": ("..\\x.safetensors", "backslash"),
    "nul": ("x.safetensors\0.txt", "NUL"),
    "empty-segment": ("sub//x.safetensors", "empty or '.' segment"),
    "dot-segment": ("./x.safetensors", "empty or '.' segment"),
    # JSON's \ud800 escape decodes to a lone surrogate, on which every os call raises; the
    # surrogateescape range (a byte that is not UTF-8) is refused too: an index is UTF-8 text
    "lone-surrogate": ("\ud800.safetensors", r"lone surrogate \(U\+D800\)"),
    "escaped-byte": ("\udcff.safetensors", r"lone surrogate \(U\+DCFF\)"),
    "surrogate-folder": ("sub\udbff/x.safetensors", "lone surrogate"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_NAMES))
def test_a_shard_name_outside_the_directory_is_refused(case: str) -> None:
    shard, expected = HOSTILE_NAMES[case]
    data = _index_bytes({"ok": "a.safetensors", "w": shard})
    with pytest.raises(SetError, match=expected) as caught:
        parse_index(data, "dir/i.json")
    assert (caught.value.path, caught.value.tensor, caught.value.shard) == (
        "dir/i.json",
        "w",
        shard,
    )


@pytest.mark.parametrize("shard", ["\ud800.safetensors", "sub\udfff/x.safetensors"])
def test_a_shard_name_no_file_can_have_is_refused_through_every_opener(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shard: str
) -> None:
    from weightstore import Store, open_reader
    from weightstore.cli import main

    index = write_hand_set(tmp_path, split_in_two(tensors()))
    weight_map = json.loads(index.read_text())["weight_map"]
    weight_map["layers.3.weight"] = shard
    write_hand_set(tmp_path, {}, weight_map=weight_map)
    for opener in (open_reader, lambda p: Store.from_file(p).keys()):
        for path in (tmp_path, index):
            with pytest.raises(SetError, match="lone surrogate") as caught:
                opener(path)
            assert (caught.value.path, caught.value.tensor) == (str(index), "layers.3.weight")
    for command in (["inspect"], ["inspect", "--json"], ["verify"]):
        assert main([*command, str(tmp_path)]) == 2, command  # 3 was "internal error"
        err = capsys.readouterr().err
        assert err.count("weightstore: error:") == 1 and "internal error" not in err, err


def test_a_shard_in_a_subfolder_is_allowed() -> None:
    parsed = parse_index(_index_bytes({"w": "part/a.safetensors"}), "i.json")
    assert parsed.weight_map == {"w": "part/a.safetensors"}


def test_messages_bound_the_names_a_file_supplies() -> None:
    name, shard = "t" * 1_000_000, "/" + "s" * 1_000_000
    with pytest.raises(SetError) as caught:
        parse_index(_index_bytes({name: shard}), "i.json")
    assert len(str(caught.value)) < 1_000
    assert caught.value.tensor == name and caught.value.shard == shard  # fields keep them whole


# -- shards on disk ---------------------------------------------------------------------------


def test_locate_shards_gives_each_shard_its_path(tmp_path: Path) -> None:
    index = read_index(write_hand_set(tmp_path, split_in_two(tensors())))
    assert locate_shards(index) == {
        "model-00001-of-00002.safetensors": str(tmp_path / "model-00001-of-00002.safetensors"),
        "model-00002-of-00002.safetensors": str(tmp_path / "model-00002-of-00002.safetensors"),
    }


def test_a_shard_missing_from_disk_names_index_and_shard(tmp_path: Path) -> None:
    index = write_hand_set(tmp_path, split_in_two(tensors()))
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(SetError, match="does not exist") as caught:
        locate_shards(read_index(index))
    assert caught.value.path == str(index)
    assert caught.value.shard == "model-00002-of-00002.safetensors"
    assert caught.value.tensor == "layers.2.weight"


def test_a_shard_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    index = write_hand_set(tmp_path, split_in_two(tensors()))
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    (tmp_path / "model-00002-of-00002.safetensors").mkdir()
    with pytest.raises(SetError, match="is a directory, not a file"):
        locate_shards(read_index(index))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")
@pytest.mark.parametrize("kind", ["a FIFO", "a symlink loop"])
def test_a_shard_that_is_a_special_file_is_refused_by_what_it_is(tmp_path: Path, kind: str) -> None:
    index = read_index(write_hand_set(tmp_path, split_in_two(tensors())))
    shard = tmp_path / "model-00002-of-00002.safetensors"
    shard.unlink()
    if kind == "a FIFO":
        os.mkfifo(shard)  # opening it would block until a writer came
    else:
        os.symlink(shard.name, shard)  # every call on it fails with ELOOP
    with pytest.raises(SetError, match=f"is {kind}, not a file") as caught:
        locate_shards(index)
    assert caught.value.shard == shard.name and caught.value.tensor == "layers.2.weight"


def test_a_symlink_out_of_the_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "secret.safetensors"
    outside.write_bytes(b"anything")
    index = write_hand_set(tmp_path / "set", split_in_two(tensors()))
    shard = tmp_path / "set" / "model-00002-of-00002.safetensors"
    shard.unlink()
    shard.symlink_to(outside)
    with pytest.raises(SetError, match="outside the index's directory") as caught:
        locate_shards(read_index(index))
    assert caught.value.shard == "model-00002-of-00002.safetensors"


def test_a_symlink_to_a_directory_outside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.safetensors").write_bytes(b"anything")
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "sub").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "set" / INDEX).write_bytes(_index_bytes({"w": "sub/x.safetensors"}))
    with pytest.raises(SetError, match="outside"):
        locate_shards(read_index(tmp_path / "set" / INDEX))


def test_a_symlink_inside_the_directory_is_fine(tmp_path: Path) -> None:
    index = write_hand_set(tmp_path, split_in_two(tensors()))
    real = tmp_path / "model-00002-of-00002.safetensors"
    real.rename(tmp_path / "real.safetensors")
    real.symlink_to("real.safetensors")
    assert len(locate_shards(read_index(index))) == 2


def test_a_hugging_face_cache_snapshot_may_link_into_its_blobs(tmp_path: Path) -> None:
    # The hub cache: snapshots/<revision>/<file> -> ../../blobs/<hash>, for every file.
    repo = tmp_path / "models--org--name"
    built = write_hand_set(tmp_path / "built", split_in_two(tensors()))
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for number, file in enumerate(sorted(built.parent.iterdir())):
        blob = repo / "blobs" / f"blob{number}"
        file.rename(blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    assert len(locate_shards(read_index(snapshot / INDEX))) == 2


def test_only_a_hub_cache_repository_gets_the_blobs_exemption(tmp_path: Path) -> None:
    # A folder merely named "snapshots" beside a "blobs" folder is no hub cache.
    built = write_hand_set(tmp_path / "built", split_in_two(tensors()))
    (tmp_path / "blobs").mkdir()
    snapshot = tmp_path / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for number, file in enumerate(sorted(built.parent.iterdir())):
        blob = tmp_path / "blobs" / f"blob{number}"
        file.rename(blob)
        (snapshot / file.name).symlink_to(blob)
    with pytest.raises(SetError, match="outside"):
        locate_shards(read_index(snapshot / INDEX))
