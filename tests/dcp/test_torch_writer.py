"""Checkpoints torch's own DCP writer saved (``dcp.save`` with its default ``FileSystemWriter``),
read without torch and without running their pickle: from 1, 2 and 4 gloo ranks, DTensors
placed ``Shard(0)`` and ``Shard(1)`` (uneven), an FSDP2 model with its Adam state; every tensor
against torch's own whole tensors, bit for bit; the stores, ``open_reader``, ``inspect`` and
``convert`` over them; a process that reads one imports no torch; and hostile ``.metadata``
and ``.distcp`` files refused with typed errors naming the file and the tensor."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from tests._ranks import run_ranks  # skips without torch.distributed
from tests.dcp import _stock
from weightstore import PytorchStore, SafetensorsStore, Store, load_from, open_reader
from weightstore.cli import main
from weightstore.dcp._torch_reader import TorchDcpReader
from weightstore.distributed import chunk_bounds
from weightstore.errors import CodeObjectError, SetError, UnsupportedFormatError
from weightstore.locate import Kind, locate

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda n: f"{n} ranks")
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(f"stock{request.param}")
    run_ranks(_stock.save, request.param, str(root))
    return root


def _bits(array: np.ndarray[Any, Any]) -> Any:
    return torch.from_numpy(np.ascontiguousarray(array).view(np.uint8))


def _same(array: np.ndarray[Any, Any], tensor: Any) -> bool:
    """Bit for bit, bf16 included (NumPy holds it as ml_dtypes.bfloat16)."""
    want = tensor.reshape(-1).contiguous().view(torch.uint8)
    return tuple(array.shape) == tuple(tensor.shape) and torch.equal(_bits(array).reshape(-1), want)


def test_sharded_dtensors_read_whole_bit_for_bit(saved: Path) -> None:
    assert locate(saved / "plain").kind is Kind.TORCH_DCP
    full = _stock.full_tensors()
    with open_reader(saved / "plain") as reader:
        assert isinstance(reader, TorchDcpReader)
        assert reader.names() == ["model.b", "model.v", "model.w"]
        for name in reader.names():
            assert _same(reader.get(name), full[name.split(".")[1]]), name
        assert reader.values() == {"step": 11, "sched.lr": 0.003, "sched.name": "cosine"}
        part = reader.get_slice("model.v")[:, 5:15]  # crosses the column split of 2 and 4
        assert _same(part, full["v"][:, 5:15])


def _at(tree: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def test_an_fsdp_model_and_its_optimizer_state_read_as_torch_saved_them(saved: Path) -> None:
    expected = torch.load(saved / "train-expected.pt", weights_only=True)
    with open_reader(saved / "train") as reader:
        paths = reader.index.paths
        assert paths is not None
        names = reader.names()
        assert {n for n in names if n.startswith("model.")} == {
            f"model.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")
        }
        assert sum(n.startswith("optim.state.") for n in names) == 12  # exp_avg, _sq, step x 4
        for name in names:
            assert _same(reader.get(name), _at(expected, paths[name])), name
        lr = [v for k, v in reader.values().items() if k.endswith(".lr")]
        assert lr == [0.01]


def test_a_torch_model_loads_from_it_through_a_store(saved: Path) -> None:
    expected = torch.load(saved / "train-expected.pt", weights_only=True)["model"]
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    store = Store.from_file(saved / "train")
    assert isinstance(store, PytorchStore)
    result = load_from(model, store.with_key_remapping(r"^model\.", ""))
    assert result.is_success() and len(result.applied) == 4, result
    assert len(result.unused) == 12  # the optimizer state
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_inspect_and_convert_read_it(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(saved / "plain"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "torch-dcp"
    assert {row["name"] for row in report["tensors"]} == {"model.b", "model.v", "model.w"}
    out = saved / "plain.safetensors"
    assert main(["convert", str(saved / "plain"), str(out), "--overwrite"]) == 0
    from safetensors.torch import load_file

    converted = load_file(out)
    full = _stock.full_tensors()
    assert all(torch.equal(converted[f"model.{k}"], t) for k, t in full.items())
    assert main(["verify", str(saved / "plain")]) == 0
    assert main(["diff", str(saved / "plain"), str(out)]) == 0  # equal, tensor for tensor
    assert "result: equal (3 tensors)" in capsys.readouterr().out


def test_reading_one_imports_no_torch(saved: Path) -> None:
    code = (
        "import sys\nfrom weightstore import open_reader\n"
        f"r = open_reader({str(saved / 'train')!r})\n"
        "arrays = [r.get(n) for n in r.names()]\nvalues = r.values()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\nprint(len(arrays))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(done.stdout) > 4


def test_a_store_of_another_format_is_told_what_it_is(saved: Path) -> None:
    with pytest.raises(
        UnsupportedFormatError, match=r"torch\.distributed\.checkpoint.*PyTorch store"
    ):
        SafetensorsStore.from_file(saved / "plain").keys()


# -- hostile checkpoints ---------------------------------------------------------------------


def _copy(saved: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ckpt"
    target.mkdir(parents=True)
    for file in (saved / "plain").iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    return target


def _rewrite(directory: Path, change: Any) -> None:
    """Unpickle the real metadata (the test trusts it: torch wrote it), change it, write it."""
    metadata = pickle.loads((directory / ".metadata").read_bytes())
    change(metadata)
    (directory / ".metadata").write_bytes(pickle.dumps(metadata))


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (__import__("os").system, ("echo pwned",))


def test_a_metadata_naming_code_is_refused_and_runs_nothing(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    _rewrite(directory, lambda m: setattr(m, "planner_data", {"hook": _Evil()}))
    with pytest.raises(CodeObjectError, match=r"\.metadata.*system.*nothing ran"):
        open_reader(directory)


def test_a_metadata_naming_a_foreign_class_is_refused(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    _rewrite(directory, lambda m: setattr(m, "planner_data", {"x": Fraction(1, 3)}))
    with pytest.raises(SetError, match=r"\.metadata.*fractions.*none of torch's checkpoint rec"):
        open_reader(directory)


def _chunks(metadata: Any, name: str) -> Any:
    return metadata.state_dict_metadata[name].chunks


def test_overlapping_chunks_and_holes_are_refused_naming_the_tensor(
    saved: Path, tmp_path: Path
) -> None:
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

    directory = _copy(saved, tmp_path)

    def overlap(metadata: Any) -> None:
        chunks = _chunks(metadata, "model.w")
        chunks.append(ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([1, 1])))
        key = next(k for k in metadata.storage_data if k.fqn == "model.w")
        metadata.storage_data[type(key)("model.w", torch.Size([0, 0]), len(chunks) - 1)] = (
            metadata.storage_data[key]
        )

    _rewrite(directory, overlap)
    with pytest.raises(SetError, match=r"tensor 'model\.w'.*2 chunks hold element \[0, 0\]"):
        open_reader(directory)
    directory = _copy(saved, tmp_path / "holes")

    def hole(metadata: Any) -> None:
        entry = metadata.state_dict_metadata["model.b"]
        entry.size = torch.Size([entry.size[0] + 1])

    _rewrite(directory, hole)
    with pytest.raises(SetError, match=r"tensor 'model\.b'.*no chunk holds element \[48\]"):
        open_reader(directory)


def test_an_item_past_the_end_of_its_file_is_refused(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)

    def past(metadata: Any) -> None:
        key = next(k for k in metadata.storage_data if k.fqn == "model.b")
        metadata.storage_data[key].offset += 10**9

    _rewrite(directory, past)
    with pytest.raises(SetError, match=r"tensor 'model\.b'.*past the end"):
        open_reader(directory)


def test_a_truncated_rank_file_fails_naming_it(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    rank_file = sorted(directory.glob("*.distcp"))[-1]
    rank_file.write_bytes(rank_file.read_bytes()[:100])
    with pytest.raises(SetError, match=rf"{rank_file.name}.*past the end of the 100-byte file"):
        open_reader(directory)  # refused at open, before any tensor is asked for


def test_an_item_that_is_no_tensor_of_its_chunk_is_refused(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)

    def swap(metadata: Any) -> None:
        step = next(k for k in metadata.storage_data if k.fqn == "step")
        bias = next(k for k in metadata.storage_data if k.fqn == "model.b")
        metadata.storage_data[bias] = metadata.storage_data[step]

    _rewrite(directory, swap)
    with open_reader(directory) as reader, pytest.raises(SetError, match=r"'model\.b'.*not a"):
        reader.get("model.b")


def test_convert_writes_the_model_only_unless_told_and_inspect_shows_the_groups(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file

    assert main(["inspect", str(saved / "train")]) == 0
    shown = capsys.readouterr().out
    assert "groups:   model 4 tensors (" in shown and "optimizer 12 tensors (" in shown
    assert main(["inspect", str(saved / "train"), "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["training_groups"]
    assert {g: v["tensors"] for g, v in groups.items()} == {"model": 4, "optimizer": 12}
    model_only = tmp_path / "model.safetensors"
    assert main(["convert", str(saved / "train"), str(model_only), "-q"]) == 0
    said = capsys.readouterr().err
    assert "model's tensors only, leaving out 12 tensors" in said and "--with-optimizer" in said
    assert sorted(load_file(model_only)) == [
        f"model.{i}.{p}" for i in (0, 2) for p in ("bias", "weight")
    ]
    everything = tmp_path / "all.safetensors"
    assert main(["convert", str(saved / "train"), str(everything), "-q", "--with-optimizer"]) == 0
    assert len(load_file(everything)) == 16


class _CountingPread:
    """A pread source that adds up the bytes each read returns, by file."""

    read_bytes: ClassVar[dict[str, int]] = {}

    def __init__(self, path: str) -> None:
        from weightstore.io._source import PreadSource

        self._source, self._path = PreadSource(path), path

    name = property(lambda self: self._source.name)
    size = property(lambda self: self._source.size)

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> Any:
        _CountingPread.read_bytes[self._path] = _CountingPread.read_bytes.get(self._path, 0) + size
        return self._source.read(offset, size, what, tensor)

    def close(self) -> None:
        self._source.close()


def test_a_rank_of_another_world_size_reads_only_the_chunks_of_its_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from weightstore.dcp import _torch_reader
    from weightstore.distributed import load

    run_ranks(_stock.save_large, 4, str(tmp_path))  # saved by 4 ranks
    full = {f"model.{k}": t.numpy() for k, t in _stock.large_tensors().items()}
    monkeypatch.setattr(_torch_reader, "MmapSource", _CountingPread)
    rows, cols = _stock.LARGE
    for world_size in (2, 3):  # 3: each rank's slice cuts chunks (171 of 128-row chunks)
        for rank in range(world_size):
            _CountingPread.read_bytes = {}
            mine = [chunk_bounds(size, rank, world_size) for size in (rows, cols)]
            model = {"model": {
                "rows": np.zeros((mine[0][1] - mine[0][0], cols), np.float32),
                "cols": np.zeros((rows, mine[1][1] - mine[1][0]), np.float32),
            }}  # fmt: skip
            store = PytorchStore.from_file(tmp_path / "large")
            plan = {r"\.rows$": 0, r"\.cols$": 1}
            assert load(store, model, plan, rank=rank, world_size=world_size).is_success()
            assert np.array_equal(model["model"]["rows"], full["model.rows"][slice(*mine[0])])
            assert np.array_equal(model["model"]["cols"], full["model.cols"][:, slice(*mine[1])])
            share = model["model"]["rows"].nbytes + model["model"]["cols"].nbytes
            read = sum(_CountingPread.read_bytes.values())
            assert share <= read <= 1.1 * share, (world_size, rank, read, share)
            print(f"rank {rank} of {world_size} (saved by 4): read {read:,} bytes for a share "
                  f"of {share:,} ({read / share:.4f}x)")  # fmt: skip


def test_a_converted_set_passes_from_pretrained(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    with pytest.warns(UserWarning):  # torch: no process group, saving in one process
        dcp.save({k: v for k, v in model.state_dict().items()}, checkpoint_id=tmp_path / "ckpt")
    served = tmp_path / "served"
    args = ["convert", str(tmp_path / "ckpt"), str(served), "--max-shard-size", "40KB", "-q"]
    assert main(args) == 0
    assert len(list(served.glob("model-*-of-*.safetensors"))) > 1
    config.save_pretrained(served)
    again = transformers.LlamaForCausalLM.from_pretrained(served).eval()
    tokens = torch.arange(10).reshape(1, 10)
    with torch.no_grad():
        assert torch.equal(again(tokens).logits, model(tokens).logits)
