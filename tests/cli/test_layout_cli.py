"""``convert --layout`` / ``--layout-file`` and ``inspect --layout``: presets and user rules
on the command line, and a layout that cannot run failing with the rule's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore.adapters import Concat, Layout, LayoutRule, Split, layout_preset
from weightstore.cli import main
from weightstore.stores import SafetensorsStore


def _llama_style(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    rows = {"q_proj": 8, "k_proj": 4, "v_proj": 4, "gate_proj": 6, "up_proj": 6}
    arrays = {
        f"model.layers.{i}.{'mlp' if p in ('gate_proj', 'up_proj') else 'self_attn'}.{p}.weight":
        rng.standard_normal((n, 8)).astype(np.float32)
        for i in range(2) for p, n in rows.items()
    }  # fmt: skip
    SafetensorsStore.from_file(path).collect_from(arrays)
    return arrays


def _read(path: Path) -> dict[str, bytes]:
    snapshots = SafetensorsStore.from_file(path).get_all_snapshots()
    return {name: s.to_numpy().tobytes() for name, s in snapshots.items()}


def test_convert_fuses_with_a_preset_and_splits_back_with_sized_rules(tmp_path: Path) -> None:
    arrays = _llama_style(tmp_path / "llama.safetensors")
    fused = tmp_path / "phi.safetensors"
    argv = ["convert", str(tmp_path / "llama.safetensors"), str(fused), "-q"]
    assert main([*argv, "--layout", "fuse-qkv-gate-up"]) == 0
    written = _read(fused)
    qkv = np.concatenate([arrays[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv"])
    assert written["model.layers.0.self_attn.qkv_proj.weight"] == qkv.tobytes()
    assert "model.layers.0.self_attn.q_proj.weight" not in written
    rules = Layout([
        LayoutRule([r"(.*)\.qkv_proj\.weight"],
                   ["$1.q_proj.weight", "$1.k_proj.weight", "$1.v_proj.weight"],
                   [Split(0, (8, 4, 4))]),
        LayoutRule([r"(.*)\.gate_up_proj\.weight"], ["$1.gate_proj.weight", "$1.up_proj.weight"],
                   [Split(0, (6, 6))]),
    ])  # fmt: skip
    (tmp_path / "rules.json").write_text(rules.to_json())
    back = tmp_path / "back.safetensors"
    argv = ["convert", str(fused), str(back), "-q", "--layout-file", str(tmp_path / "rules.json")]
    assert main(argv) == 0
    assert _read(back) == {name: array.tobytes() for name, array in arrays.items()}


def test_convert_refuses_a_split_without_sizes_naming_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _llama_style(tmp_path / "llama.safetensors")
    fused = tmp_path / "phi.safetensors"
    main(["convert", str(tmp_path / "llama.safetensors"), str(fused), "-q", "--layout",
          "fuse-qkv-gate-up"])  # fmt: skip
    capsys.readouterr()
    back = tmp_path / "back.safetensors"
    assert main(["convert", str(fused), str(back), "-q", "--layout", "split-qkv-gate-up"]) == 2
    err = capsys.readouterr().err
    assert "layout rule 'split qkv'" in err and "give the sizes" in err
    assert not back.exists()


def test_inspect_shows_what_a_layout_makes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _llama_style(tmp_path / "llama.safetensors")
    assert main(["inspect", str(tmp_path / "llama.safetensors"), "--layout",
                 "fuse-qkv-gate-up"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "4 groups, 0 problems" in out
    assert "-> model.layers.1.mlp.gate_up_proj.weight [12, 8]" in out


def test_a_bad_layout_file_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _llama_style(tmp_path / "llama.safetensors")
    (tmp_path / "rules.json").write_text('{"rules": [{"sources": ["a"]}]}')
    argv = ["convert", str(tmp_path / "llama.safetensors"), str(tmp_path / "o.safetensors"),
            "--layout-file", str(tmp_path / "rules.json")]  # fmt: skip
    assert main(argv) != 0
    assert "sources, targets and ops" in capsys.readouterr().err


def test_the_presets_print_as_rules_a_user_can_copy() -> None:
    text = layout_preset("fuse-qkv-gate-up").to_json()
    assert Layout.from_json(text).rules[0].ops == (Concat(0),)


def test_the_help_names_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    from weightstore.adapters import LAYOUT_PRESETS

    assert main(["convert", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # wrapped at hyphens
    assert all(name in text for name in LAYOUT_PRESETS)
