"""What the commands do with what a checkpoint holds besides weights (issue 23): a training
checkpoint's optimizer state and arguments, a whole-module save, a pickle that would run a
command. Real `torch.save` files throughout."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.cli._support import CallsGlobal, assert_error, run_cli

torch = pytest.importorskip("torch")

WARNING = "weightstore: warning: "


class Net(torch.nn.Module):  # type: ignore[misc]
    """A user's own class: `torch.save(model)` pickles it by its import path."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.out = torch.nn.Linear(2, 2)

    def forward(self, x: Any) -> Any:
        return self.out(self.fc(x))


def training_checkpoint(path: Path) -> Path:
    """``{'model', 'optimizer', 'epoch', 'args'}`` after one Adam step: 4 weights, 12 tensors
    of optimizer state."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": 3,
        "args": argparse.Namespace(lr=0.1),
    }
    torch.save(checkpoint, path)
    return path


def warnings_of(done: Any) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith(WARNING)]


def test_inspect_names_the_keys_holding_tensors_and_the_objects(tmp_path: Path) -> None:
    path = training_checkpoint(tmp_path / "ckpt.pt")
    done = run_cli("inspect", path)
    assert done.returncode == 0, done.stderr
    assert (
        "tensors under several top-level keys: model (4 tensors), optimizer (12 tensors); "
        "--top-level-key model lists one"
    ) in done.stdout
    assert "  optimizer.param_groups: [{'lr': 0.1, " in done.stdout
    assert "  args: Namespace(lr=0.1)\n" in done.stdout  # its fields, as --json shows them
    document = json.loads(run_cli("inspect", path, "--json").stdout)
    assert document["tensor_keys"] == {"model": 4, "optimizer": 12}
    assert document["others"]["args"] == {"lr": 0.1}
    assert document["others"]["optimizer.param_groups"][0]["lr"] == 0.1
    keyed = run_cli("inspect", path, "--top-level-key", "model")
    assert keyed.returncode == 0 and "several top-level keys" not in keyed.stdout


def test_convert_of_a_training_checkpoint_points_to_the_key(tmp_path: Path) -> None:
    path = training_checkpoint(tmp_path / "ckpt.pt")
    whole = run_cli("convert", path, tmp_path / "whole.safetensors")
    assert whole.returncode == 0, whole.stderr
    assert "16 tensors" in whole.stdout
    assert warnings_of(whole) == [
        f"{WARNING}{path}: converting the tensors of several top-level keys: model "
        "(4 tensors), optimizer (12 tensors); to convert one, pass --top-level-key model"
    ]
    keyed = run_cli("convert", path, tmp_path / "model.safetensors", "--top-level-key", "model")
    assert keyed.returncode == 0, keyed.stderr
    assert "4 tensors" in keyed.stdout and not warnings_of(keyed)


def test_a_conversion_that_converts_nothing_is_refused(tmp_path: Path) -> None:
    path = training_checkpoint(tmp_path / "ckpt.pt")
    out = tmp_path / "args.safetensors"
    done = run_cli("convert", path, out, "--top-level-key", "args")
    assert_error(done, 2, str(path), "nothing to convert", "'args' holds no tensors")
    assert not out.exists()
    filtered = run_cli("convert", path, out, "--top-level-key", "model", "--filter", "nope")
    assert_error(filtered, 2, "nothing to convert: --filter matches none of its 4 tensors")
    assert not out.exists()


def test_the_top_level_key_is_a_dotted_path_unless_a_key_is_spelled_so(tmp_path: Path) -> None:
    path = tmp_path / "nested.pt"
    torch.save(
        {
            "state_dict": {"model": {"w": torch.ones(2)}, "ema": {"w": torch.zeros(2)}},
            "a.b": {"exact": torch.ones(1)},
            "a": {"b": {"dotted": torch.ones(1)}},
        },
        path,
    )
    out = tmp_path / "out.safetensors"
    done = run_cli("convert", path, out, "--top-level-key", "state_dict.model")
    assert done.returncode == 0, done.stderr
    assert json.loads(run_cli("inspect", out, "--json").stdout)["tensors"][0]["name"] == "w"
    listed = json.loads(run_cli("inspect", path, "--json", "--top-level-key", "a.b").stdout)
    assert [row["name"] for row in listed["tensors"]] == ["exact"]  # the exact key wins
    missing = run_cli("inspect", path, "--top-level-key", "state_dict.nope")
    assert_error(missing, 2, "'state_dict.nope' not found")


def test_a_whole_module_save_is_listed_and_passes_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "whole.pt"
    torch.save(Net(), path)
    qualname = f"{Net.__module__}.Net"
    warning = f"{WARNING}{path}: holds objects of classes from outside torch and NumPy ({qualname}"
    inspected = run_cli("inspect", path)
    assert inspected.returncode == 0, inspected.stderr
    assert f"objects:\n  (the whole file): <inert {qualname} object>\n" in inspected.stdout
    assert "suspicious" not in inspected.stdout
    assert [line.startswith(warning) for line in warnings_of(inspected)] == [True]
    document = json.loads(run_cli("inspect", path, "--json").stdout)
    assert document["object_classes"] == [{"module": Net.__module__, "name": "Net", "where": ""}]
    assert document["suspicious_globals"] == []
    verified = run_cli("verify", path)
    assert verified.returncode == 0, verified.stderr
    assert f"note: an object of class {qualname} at (the whole file)" in verified.stdout
    assert [line.startswith(warning) for line in warnings_of(verified)] == [True]
    converted = run_cli("convert", path, tmp_path / "whole.safetensors")
    assert converted.returncode == 0, converted.stderr
    assert "4 tensors" in converted.stdout
    assert [line.startswith(warning) for line in warnings_of(converted)] == [True]


def test_a_pickle_that_would_run_a_command_fails_every_command(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    hook = CallsGlobal(os.system, f"touch {marker}")
    torch.save({"w": torch.ones(2), "hook": hook}, path)
    qualname = f"{os.system.__module__}.system"
    out = tmp_path / "out.safetensors"
    assert_error(run_cli("inspect", path), 2, f"the pickle names {qualname}", "--allow-objects")
    assert_error(run_cli("verify", path), 2, "verification failed")
    converted = run_cli("convert", path, out)
    assert_error(converted, 2, str(path), f"the pickle names {qualname} at 'hook'")
    assert "--allow-objects" in converted.stderr and not out.exists()
    allowed = run_cli("convert", path, out, "--allow-objects")
    assert allowed.returncode == 0, allowed.stderr
    assert "1 tensor" in allowed.stdout
    assert not marker.exists()


def test_paths_and_namespaces_in_a_training_scripts_arguments_pass(tmp_path: Path) -> None:
    # Training scripts keep their output directory as a pathlib path and some keep their
    # arguments in a SimpleNamespace: data, which torch.load rebuilds without running code.
    import types

    path = tmp_path / "ckpt.pt"
    args = types.SimpleNamespace(output_dir=Path("/runs/a"), lr=0.1)
    torch.save({"model": Net().state_dict(), "args": args}, path)
    done = run_cli("inspect", path)
    assert done.returncode == 0, done.stderr
    assert "suspicious" not in done.stderr and "runs code" not in done.stderr
    done = run_cli("convert", path, tmp_path / "out.safetensors", "--top-level-key", "model")
    assert done.returncode == 0, done.stderr
