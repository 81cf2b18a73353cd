"""The DCP index's size limit, sized for the largest real checkpoints (`MAX_DCP_INDEX_SIZE`),
and the parse that has to keep up with them: nesting counted on the text, strings shared."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from weightstore.dcp._index import (
    DCP_INDEX_NAME,
    MAX_DCP_INDEX_SIZE,
    DcpChunk,
    DcpTensor,
    dcp_index_bytes,
    parse_dcp_index,
    rank_file_name,
    read_dcp_index,
)
from weightstore.dcp._reader import open_dcp
from weightstore.dtypes import from_name
from weightstore.errors import LimitExceeded, SetError
from weightstore.sets._index import MAX_INDEX_SIZE, _nesting, decode_json

SET_ID = "0123456789abcdef0123456789abcdef"


def small_index() -> bytes:
    chunks = [DcpChunk(rank_file_name(r, SET_ID, "bpk"), "w", [r, 0], [1, 4]) for r in (0, 1)]
    tensors = {"w": DcpTensor(from_name("F32"), (2, 4), chunks)}
    return dcp_index_bytes(
        SET_ID,
        tensors,
        {},
        paths=None,
        planner_data=None,
        metadata={},
        container="burnpack",
        dcp_version="1.0.0",
    )


def test_the_limit_holds_twice_a_405b_training_checkpoint_on_1024_ranks() -> None:
    # benchmarks/bench_dcp_index.py: 512,642,332 bytes (FSDP), 515,107,009 (TP=8 x FSDP=128).
    assert MAX_DCP_INDEX_SIZE == 2**30 >= 2 * 515_107_009
    assert MAX_DCP_INDEX_SIZE > MAX_INDEX_SIZE  # the set's 64 MiB would refuse them


@pytest.mark.parametrize("reader", [read_dcp_index, open_dcp])
def test_every_dcp_reader_defaults_to_the_dcp_limit(reader: Callable[..., object]) -> None:
    default = inspect.signature(reader).parameters["max_index_size"].default
    assert default == MAX_DCP_INDEX_SIZE


def test_an_index_at_the_limit_is_read_and_one_byte_over_is_refused(tmp_path: Path) -> None:
    data = small_index()
    (tmp_path / DCP_INDEX_NAME).write_bytes(data)
    assert read_dcp_index(tmp_path, max_index_size=len(data)).set_id == SET_ID
    with pytest.raises(LimitExceeded) as caught:
        read_dcp_index(tmp_path, max_index_size=len(data) - 1)
    assert (caught.value.found, caught.value.limit) == (len(data), len(data) - 1)


def sparse_index(tmp_path: Path, size: int) -> Path:
    """An index of `size` bytes of NULs, which takes no disk: not JSON, so reading it at all
    fails with a `SetError`, and a `LimitExceeded` shows it was refused before."""
    with open(tmp_path / DCP_INDEX_NAME, "wb") as file:
        file.truncate(size)
    return tmp_path


def test_without_an_option_the_default_is_the_limit(tmp_path: Path) -> None:
    over = sparse_index(tmp_path, MAX_DCP_INDEX_SIZE + 1)
    for read in (read_dcp_index, open_dcp):
        with pytest.raises(LimitExceeded) as caught:
            read(over)
        assert (caught.value.found, caught.value.limit) == (MAX_DCP_INDEX_SIZE + 1, 2**30)


def test_an_index_over_the_sets_limit_is_read(tmp_path: Path) -> None:
    # Over the 64 MiB that used to refuse every large checkpoint: read, and refused as no JSON.
    with pytest.raises(SetError, match="not valid JSON"):
        read_dcp_index(sparse_index(tmp_path, MAX_INDEX_SIZE + 1))


def test_the_torch_readers_default_to_the_limit(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from weightstore.dcp._storage import BurnpackStorageReader, SafetensorsStorageReader

    for reader in (BurnpackStorageReader, SafetensorsStorageReader):
        default = inspect.signature(reader).parameters["max_index_size"].default
        assert default == MAX_DCP_INDEX_SIZE
    over = sparse_index(tmp_path, MAX_DCP_INDEX_SIZE + 1)
    with pytest.raises(LimitExceeded) as caught:
        BurnpackStorageReader(over).read_metadata()
    assert caught.value.limit == MAX_DCP_INDEX_SIZE


# -- a real-shaped index --------------------------------------------------------------------------

HIDDEN, INTERMEDIATE, KV, VOCAB = 16384, 53248, 1024, 128256


def llama_405b_shapes() -> dict[str, tuple[int, ...]]:
    """Llama-3.1-405B's 1,137 parameters."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for n in range(126):
        layer = f"model.layers.{n}"
        shapes |= {
            f"{layer}.self_attn.q_proj.weight": (HIDDEN, HIDDEN),
            f"{layer}.self_attn.k_proj.weight": (KV, HIDDEN),
            f"{layer}.self_attn.v_proj.weight": (KV, HIDDEN),
            f"{layer}.self_attn.o_proj.weight": (HIDDEN, HIDDEN),
            f"{layer}.mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{layer}.mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{layer}.mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
            f"{layer}.input_layernorm.weight": (HIDDEN,),
            f"{layer}.post_attention_layernorm.weight": (HIDDEN,),
        }
    return shapes | {"model.norm.weight": (HIDDEN,), "lm_head.weight": (VOCAB, HIDDEN)}


def fsdp_tensors(ranks: int) -> dict[str, DcpTensor]:
    """Each parameter split on dim 0 over `ranks` as FSDP2 splits it: the last chunks short or
    empty; and a 0-d ``step`` rank 0 saves."""
    f32, tensors = from_name("F32"), {}
    for fqn, shape in llama_405b_shapes().items():
        name, step = f"model.{fqn}", -(-shape[0] // ranks)
        chunks = []
        for rank in range(ranks):
            start = min(rank * step, shape[0])
            rows = min(step, shape[0] - start)
            offsets, sizes = (start,) + (0,) * (len(shape) - 1), (rows, *shape[1:])
            chunks.append(DcpChunk(rank_file_name(rank, SET_ID, "bpk"), name, offsets, sizes))
        tensors[name] = DcpTensor(f32, shape, chunks)
    step_chunk = DcpChunk(rank_file_name(0, SET_ID, "bpk"), "optim.state.step", (), ())
    tensors["optim.state.step"] = DcpTensor(f32, (), [step_chunk])
    return tensors


def index_of(tensors: dict[str, DcpTensor]) -> bytes:
    return dcp_index_bytes(
        SET_ID,
        tensors,
        {"optim.param_groups.lr": 3e-4},
        paths=None,
        planner_data=None,
        metadata={},
        container="burnpack",
        dcp_version="1.0.0",
    )


def test_a_405b_index_on_64_ranks_reads_back_sharing_its_strings() -> None:
    tensors = fsdp_tensors(64)
    data = index_of(tensors)
    assert len(tensors) == 1_138 and 5 * 2**20 < len(data) < MAX_INDEX_SIZE
    index = parse_dcp_index(data, "ckpt/dcp.index.json")
    assert index.tensors == tensors and index.values == {"optim.param_groups.lr": 3e-4}
    # 3.5 million chunks on 1,024 ranks: a copy of the file's name and of the tensor's in each
    # would be 600 MB.
    chunks = [chunk for tensor in index.tensors.values() for chunk in tensor.chunks]
    assert len({id(chunk.file) for chunk in chunks}) == 64
    assert all(chunk.name is fqn for fqn, t in index.tensors.items() for chunk in t.chunks)


def test_ranks_past_a_tensors_rows_hold_empty_chunks() -> None:
    f32, rows = from_name("F32"), [(min(r, 1_000), int(r < 1_000)) for r in range(1_024)]
    chunks = [
        DcpChunk(rank_file_name(r, SET_ID, "bpk"), "w", (start, 0), (size, 4))
        for r, (start, size) in enumerate(rows)
    ]
    tensors = {"w": DcpTensor(f32, (1_000, 4), chunks)}
    assert parse_dcp_index(index_of(tensors), "i.json").tensors == tensors


# -- nesting, counted on the text -----------------------------------------------------------------


def tree_depth(value: object) -> int:
    """The decoded value's nesting, walked (the reference)."""
    if isinstance(value, dict):
        return 1 + max(map(tree_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(tree_depth, value), default=0)
    return 0


NESTED_TEXTS = [
    "1",
    '"[[["',
    "{}",
    "[[], {}]",
    '{"a": "]]]]", "b": [[["x"]]]}',
    '["\\"[[[", [["\\\\"], "\\\\\\"{{{"]]',  # escaped quotes and backslashes
    '["\\\\", "[", "", "", "]]", [[[]]]]',
    '{"\\u005b\\u005b": [{"k": "{\\"}"}]}',
    '["é[漢]", ["\\n[\\t"]]',
    '["", "", ""]',
]


@pytest.mark.parametrize("text", NESTED_TEXTS)
def test_nesting_on_the_text_is_the_decoded_values(text: str) -> None:
    data = text.encode()
    assert _nesting(data) == tree_depth(json.loads(text))
    assert decode_json(data, "i.json", 64) == json.loads(text)


def test_nesting_past_the_limit_is_refused_with_its_depth() -> None:
    data = b'{"a": "[[[[", "b": ' + b"[" * 20 + b'"]]"' + b"]" * 20 + b"}"
    assert decode_json(data, "i.json", 21) is not None
    with pytest.raises(SetError, match="nests 21 levels deep, over the limit of 20"):
        decode_json(data, "i.json", 20)


def test_opening_a_checkpoint_parses_its_index_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # locate parses the index to learn the rank files' format; the open that follows took a
    # second parse (20 s more for a 405B checkpoint's index) until the first was handed over.
    from tests.dcp.test_reader import write_checkpoint
    from weightstore import Store, open_reader
    from weightstore.dcp import _index

    directory = write_checkpoint(tmp_path / "ckpt")
    parses: list[str] = []
    real = _index.parse_dcp_index

    def counting(data: bytes, path: str) -> _index.DcpIndex:
        parses.append(path)
        return real(data, path)

    monkeypatch.setattr(_index, "parse_dcp_index", counting)
    with open_reader(directory) as reader:
        assert reader.names()
    assert len(parses) == 1
    with Store.from_file(directory) as store:
        assert store.keys()
    assert len(parses) == 2
    assert not _index._HANDED_OVER  # nothing is kept once taken


def test_a_handed_over_index_is_not_taken_for_a_changed_file(tmp_path: Path) -> None:
    from tests.dcp.test_reader import write_checkpoint
    from weightstore.dcp import _index

    directory = write_checkpoint(tmp_path / "ckpt")
    first = _index.read_dcp_index(directory, hand_over=True)
    index = directory / _index.DCP_INDEX_NAME
    index.write_bytes(index.read_bytes() + b" ")  # same content, another size
    second = _index.read_dcp_index(directory)
    assert second is not first and second.tensors.keys() == first.tensors.keys()
    held = _index.read_dcp_index(directory, hand_over=True)
    with pytest.raises(LimitExceeded):  # the limit holds for a handed-over index too
        _index.read_dcp_index(directory, max_index_size=10)
    assert not _index._HANDED_OVER and held is not None
