"""``--layout PRESET`` and ``--layout-file RULES.json``: the fused-layout rules a command
runs, from the library's presets or a user's file (docs/layouts.md has the JSON form)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weightstore.cli._errors import about

if TYPE_CHECKING:  # the rules load NumPy; a command without --layout never needs them
    from weightstore.adapters import Layout

__all__ = ["add_layout_flags", "layout_of"]


def add_layout_flags(parser: Any, verb: str) -> None:
    """Register the two flags on `parser`; `verb` says what the rules do in that command."""
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument(
        "--layout",
        metavar="PRESET",
        help=f"{verb} through a layout preset (fuse-qkv-gate-up, split-qkv-gate-up, "
        "stack-mixtral-experts, stack-experts, gpt2-conv1d-to-linear, lstm-torch-to-burn, "
        "gru-torch-to-burn; docs/layouts.md)",
    )
    chosen.add_argument(
        "--layout-file", metavar="RULES", help=f"{verb} through the layout rules in a JSON file"
    )


def layout_of(args: argparse.Namespace) -> Layout | None:
    """The layout the flags name, or None.

    Raises:
        InvalidOptionError: no preset has the name given; the message lists the presets.
        LayoutError: the rules file is no rule set.
    """
    from weightstore.adapters import Layout, layout_preset

    if args.layout is not None:
        with about("--layout"):
            return layout_preset(args.layout)
    if args.layout_file is not None:
        with about(args.layout_file):
            return Layout.from_json(Path(args.layout_file).read_text(encoding="utf-8"))
    return None
