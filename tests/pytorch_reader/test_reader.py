"""`PytorchReader` (`_reader.py`, `_walk.py`): names, whole-module saves, training checkpoints,
top-level keys, configs beside weights, and the ``inspect`` command."""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    assert_same,
    flatten,
    op_dict,
    op_list,
    op_storage,
    op_str,
    op_tensor,
    pickle_of,
    write_zip,
)
from weightstore.cli import main
from weightstore.cli._report import summarize
from weightstore.errors import (
    DescriptorError,
    InvalidOptionError,
    KeyNotFoundError,
    LimitExceeded,
)
from weightstore.pytorch_reader import InertObject, PytorchReader
from weightstore.pytorch_reader._legacy import CountedStorages
from weightstore.pytorch_reader._zip import ZipStorages

torch = pytest.importorskip("torch")
nn = torch.nn


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, bias=False)
        self.norm = nn.BatchNorm2d(channels)
        self.register_buffer("scale", torch.full((channels,), 2.0))
        self.register_buffer("scratch", torch.zeros(channels), persistent=False)
        self.register_buffer("unset", None)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.blocks = nn.ModuleList([Block(8), Block(8)])
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(8, 2, bias=False))
        self.tied = self.stem  # one module under two names: state_dict lists it twice
        self.gate = nn.Parameter(torch.tensor(0.5))
        self.config = {"depth": 2, "act": "relu"}


def save(obj: Any, path: Path, legacy: bool = False, protocol: int = 2) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(obj, path, _use_new_zipfile_serialization=not legacy, pickle_protocol=protocol)
    return path


def trained() -> Net:
    torch.manual_seed(0)
    return Net()


@pytest.mark.parametrize(("legacy", "protocol"), [(False, 2), (False, 4), (False, 5), (True, 2)])
def test_a_whole_module_save_reads_as_its_state_dict(
    tmp_path: Path, legacy: bool, protocol: int
) -> None:
    model = trained()
    path = save(model, tmp_path / "model.pt", legacy, protocol)
    with PytorchReader(path) as reader:
        assert reader.names() == list(model.state_dict())
        assert "blocks.0.scratch" not in reader and "blocks.0.unset" not in reader
        for name, tensor in model.state_dict().items():
            assert_same(reader.get(name), tensor, name)
        root = reader.load_object()
    assert isinstance(root, InertObject)
    assert root.class_name == f"{__name__}.Net"
    assert root.attributes["config"] == {"depth": 2, "act": "relu"}


def checkpoint() -> tuple[dict[str, Any], Net]:
    model = trained()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    model.stem(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    np.random.seed(1)
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": 3,
        "args": argparse.Namespace(lr=1e-3, tag="run"),
        "rng": torch.get_rng_state(),
        "np_rng": np.random.get_state(),
        "history": [0.5, 0.25],
    }, model


@pytest.mark.parametrize(("legacy", "protocol"), [(False, 2), (False, 5), (True, 4)])
def test_a_training_checkpoint_reads_whole(tmp_path: Path, legacy: bool, protocol: int) -> None:
    ckpt, _ = checkpoint()
    path = save(ckpt, tmp_path / "ckpt.pt", legacy, protocol)
    expected = flatten(ckpt)
    with PytorchReader(path) as reader:
        assert reader.names() == list(expected)
        assert "optimizer.state.1.exp_avg" in reader  # int keys, printed
        for name, tensor in expected.items():
            assert_same(reader.get(name), tensor, name)
        assert reader.load_object("epoch") == 3
        assert vars(reader.load_object("args")) == {"lr": 1e-3, "tag": "run"}
        state = reader.load_object("np_rng")
        assert state[0] == "MT19937"
        np.testing.assert_array_equal(state[1], ckpt["np_rng"][1])
        groups = reader.load_object("optimizer")["param_groups"]
        assert groups[0]["lr"] == ckpt["optimizer"]["param_groups"][0]["lr"]
        others = {"epoch", "args", "np_rng", "history", "scheduler", "optimizer.param_groups"}
        assert set(reader.others()) == others  # a tensor-holding dict's objects, one down
        assert reader.others()["history"] == "[0.5, 0.25]"


def test_top_level_key_selects_and_names_relative(tmp_path: Path) -> None:
    ckpt, model = checkpoint()
    path = save(ckpt, tmp_path / "ckpt.pt")
    with PytorchReader(path, top_level_key="model") as reader:
        assert reader.names() == list(model.state_dict())
        assert reader.metadata().tensor_count == len(model.state_dict())
        assert reader.load_object("epoch") == 3  # other keys stay reachable
        assert list(reader.load_object()) == list(model.state_dict())
        with pytest.raises(KeyNotFoundError) as missing:
            reader.load_object("nope")
        assert missing.value.key == "nope"
    with pytest.raises(KeyNotFoundError) as caught:
        PytorchReader(path, top_level_key="state_dict")
    assert caught.value.available == list(ckpt)
    assert "'model', 'optimizer'" in str(caught.value)


def test_bad_options_are_refused(tmp_path: Path) -> None:
    path = save({"a": torch.ones(1)}, tmp_path / "a.pt")
    with pytest.raises(InvalidOptionError):
        PytorchReader(path, max_nodes=0)


def test_a_tensor_is_checked_once_and_errors_every_time(tmp_path: Path) -> None:
    good = op_tensor(op_storage("0", 2), 0, (2,), (1,))
    past_end = op_tensor(op_storage("1", 2), 0, (3,), (1,))  # reaches past its storage
    body = op_dict([(op_str("good"), good), (op_str("bad"), past_end)])
    path = write_zip(tmp_path / "m.pt", pickle_of(body), {"0": bytes(8), "1": bytes(8)})
    with PytorchReader(path) as reader:
        first = reader.tensor("good")
        assert reader.descriptor("good") is first and reader.tensor("good").name == "good"
        assert reader.get("good").tolist() == [0.0, 0.0]
        for _ in range(2):
            with pytest.raises(DescriptorError) as caught:
                reader.tensor("bad")
            assert caught.value.tensor == "bad"


def test_a_bare_tensor_is_named_by_the_empty_path(tmp_path: Path) -> None:
    with PytorchReader(save(torch.arange(3), tmp_path / "t.pt")) as reader:
        assert reader.names() == [""]
        assert reader.get("").tolist() == [0, 1, 2]


def test_listing_reads_no_tensor_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> memoryview:
        raise AssertionError("tensor data was read")

    monkeypatch.setattr(ZipStorages, "storage_bytes", refuse)
    monkeypatch.setattr(CountedStorages, "storage_bytes", refuse)
    ckpt, _ = checkpoint()
    for legacy in (False, True):
        with PytorchReader(save(ckpt, tmp_path / f"{legacy}.pt", legacy)) as reader:
            names = reader.names()
            assert reader.metadata().tensor_count == len(names)
            assert all(reader.tensor(name).shape is not None for name in names)
            reader.others()


def test_shared_references_cannot_make_naming_explode(tmp_path: Path) -> None:
    # level n is [level n-1, level n-1] over one tensor: 2**40 paths.
    tensor = op_tensor(op_storage("0", 1), 0, (1,), (1,))
    levels = op_list(tensor) + b"q\x000"
    for level in range(1, 41):
        previous = bytes([level - 1])
        levels += b"(h" + previous + b"h" + previous + b"lq" + bytes([level]) + b"0"
    body = levels + op_dict([(op_str("bomb"), b"h\x28")])
    path = write_zip(tmp_path / "bomb.pt", pickle_of(body), {"0": bytes(4)})
    with PytorchReader(path, max_nodes=50_000) as reader, pytest.raises(LimitExceeded) as caught:
        reader.names()
    assert caught.value.what == "values visited while naming tensors"


def test_a_cycle_is_named_once(tmp_path: Path) -> None:
    tensor = op_tensor(op_storage("0", 1), 0, (1,), (1,))
    body = b"}q\x00" + op_str("t") + tensor + b"s" + op_str("self") + b"h\x00s"
    path = write_zip(tmp_path / "loop.pt", pickle_of(body), {"0": bytes(4)})
    with PytorchReader(path) as reader:
        assert reader.names() == ["t"]


# -- the inspect command ------------------------------------------------------------------------


def test_inspect_lists_tensors_and_other_entries(tmp_path: Path) -> None:
    ckpt, model = checkpoint()
    path = save(ckpt, tmp_path / "ckpt.pt")
    report = summarize(path, top_level_key="model")
    assert report.format == "pytorch"
    assert [row.name for row in report.tensors] == list(model.state_dict())
    assert report.others["epoch"] == "3"
    assert report.metadata["format"] == "zip"
    whole = summarize(path)
    assert len(whole.tensors) == len(flatten(ckpt))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_inspect_lists_quantized_tensors_apart(tmp_path: Path, capsys: Any) -> None:
    tensors = {
        "ok": torch.ones(2),
        "q": torch.quantize_per_tensor(torch.ones(2), 0.5, 0, torch.qint8),
    }
    path = save(tensors, tmp_path / "q.pt")
    assert main(["inspect", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in document["tensors"]] == ["ok"]
    # A torch quantized tensor is no plain tensor: listed as a quantized group of one part.
    assert "q" not in document["others"]
    [group] = document["quantized"]
    assert (group["name"], group["layout"]) == ("q", "torch-affine")
    assert group["rule"] == "torch quantized tensor (per_tensor_affine)"
    assert [(p["name"], p["dtype"]) for p in group["parts"]] == [("q", "I8")]


def test_inspect_reports_a_missing_top_level_key(tmp_path: Path, capsys: Any) -> None:
    path = save({"model": {"w": torch.ones(1)}}, tmp_path / "m.pt")
    assert main(["inspect", str(path), "--top-level-key", "weights"]) == 2
    assert "'weights' not found; the file has 'model'" in capsys.readouterr().err
