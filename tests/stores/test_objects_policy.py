"""One policy for what a checkpoint's pickle names, in the stores and loads as in the CLI: a
global that would run code refuses the load unless objects are allowed; a user's classes (a
whole-module save) load; a dotted top-level key reads a nested dict. Real `torch.save` files."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

from weightstore import CodeObjectError, load_from
from weightstore.base._render import bounded_repr
from weightstore.errors import InvalidOptionError
from weightstore.pytorch_reader import PytorchReader
from weightstore.stores import PytorchStore, SafetensorsStore, Store

torch = pytest.importorskip("torch")


class Net(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x: Any) -> Any:
        return self.fc(x)


class _System:
    """Pickles as ``os.system(command)`` through REDUCE, as an exploit does."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (self.command,)


def _hostile(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"fc.weight": torch.ones(2, 3), "fc.bias": torch.ones(2),
                "config": {"hook": _System(f"touch {marker}")}}, path)  # fmt: skip
    return path, marker


def test_a_global_that_runs_code_refuses_every_load(tmp_path: Path) -> None:
    path, marker = _hostile(tmp_path)
    with pytest.raises(CodeObjectError) as caught:
        Store.from_file(path).keys()
    error = caught.value
    assert error.global_names == (f"{os.system.__module__}.system",)
    assert error.where == "config.hook" and error.path == str(path)
    assert "allow_objects()" in str(error)
    with pytest.raises(CodeObjectError):
        load_from(Net(), PytorchStore.from_file(path))
    with pytest.raises(CodeObjectError):  # with a key: the scan still covers the whole file
        PytorchStore.from_file(path).with_top_level_key("config").keys()
    model = Net()
    result = load_from(model, PytorchStore.from_file(path).allow_objects())
    assert result.is_success() and torch.equal(model.fc.bias, torch.ones(2))
    assert not marker.exists()


def test_the_reader_refuses_code_only_when_asked(tmp_path: Path) -> None:
    path, _ = _hostile(tmp_path)
    with PytorchReader(path) as reader:  # the low-level reader lists it, as data
        assert reader.scan().suspicious[0].where == "config.hook"
    with pytest.raises(CodeObjectError):
        PytorchReader(path, refuse_code=True)


def test_a_whole_module_save_loads(tmp_path: Path) -> None:
    path = tmp_path / "whole.pt"
    saved = Net()
    torch.save(saved, path)
    model = Net()
    assert load_from(model, Store.from_file(path)).is_success()
    assert torch.equal(model.fc.weight, saved.fc.weight)
    with PytorchReader(path) as reader:
        scan = reader.scan()
    assert scan.suspicious == () and not scan.flagged
    assert [(g.qualname, g.where) for g in scan.classes] == [(f"{Net.__module__}.Net", "")]


def test_a_dotted_top_level_key_reads_a_nested_dict(tmp_path: Path) -> None:
    path = tmp_path / "nested.pt"
    saved = Net()
    torch.save({"state_dict": {"model": saved.state_dict()}, "epoch": 1}, path)
    model = Net()
    store = Store.from_file(path).with_top_level_key("state_dict.model")
    assert load_from(model, store).is_success()
    assert torch.equal(model.fc.weight, saved.fc.weight)


def test_allow_objects_is_a_pytorch_option(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError):
        SafetensorsStore.from_file(tmp_path / "x.safetensors").allow_objects()


def test_objects_of_a_training_checkpoint(tmp_path: Path) -> None:
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = tmp_path / "ckpt.pt"
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "epoch": 3, "args": argparse.Namespace(lr=0.1)}  # fmt: skip
    torch.save(checkpoint, path)
    with PytorchReader(path) as reader:
        others = reader.others()
        assert list(others) == ["optimizer.param_groups", "epoch", "args"]
        assert others["args"] == "Namespace(lr=0.1)"
        groups = reader.load_object("optimizer.param_groups")
        assert isinstance(groups, list) and groups[0]["lr"] == 0.1


def test_a_namespace_renders_its_fields_bounded() -> None:
    namespace = argparse.Namespace(lr=0.1, name="x" * 500, **{"not a name": 1})
    assert bounded_repr(argparse.Namespace(lr=0.1, tag="run")) == "Namespace(lr=0.1, tag='run')"
    text = bounded_repr(namespace, limit=60)
    assert len(text) == 60 and text.startswith("Namespace(lr=0.1, name='xxx")
    assert bounded_repr(argparse.Namespace(**{"a b": 1})) == "Namespace('a b'=1)"


def test_a_sharded_set_with_a_hostile_shard_refuses_the_load(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    first, second = "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"
    torch.save({"fc.weight": torch.ones(2, 3), "hook": _System(f"touch {marker}")},
               tmp_path / first)  # fmt: skip
    torch.save({"fc.bias": torch.ones(2)}, tmp_path / second)
    index = {"metadata": {}, "weight_map": {"fc.weight": first, "fc.bias": second}}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    with pytest.raises(CodeObjectError) as caught:
        Store.from_file(tmp_path).keys()
    assert caught.value.path == str(tmp_path / first)
    assert Store.from_file(tmp_path).allow_objects().keys() == ["fc.bias", "fc.weight"]
    assert not marker.exists()
