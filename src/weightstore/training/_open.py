"""Which training layout is at a path, and its reader: what `weightstore.locate` asks of every
local directory (and ``.nemo`` file). The first look is at names only, with the standard
library, so a directory that is none of these costs a few ``stat`` calls and imports nothing;
each layout's own module then decides.
"""

from __future__ import annotations

import os
import re
from typing import Any, Final, Literal

__all__ = ["TrainingLayout", "open_training", "training_layout"]

TrainingLayout = Literal["nemo", "zero", "orbax"]
"""The training layouts `training_layout` tells apart."""
_ZERO_TAG: Final = re.compile(r"global_step\d+")
_ORBAX_MARKERS: Final = ("_METADATA", "_CHECKPOINT_METADATA", "manifest.ocdbt")


def training_layout(path: str) -> TrainingLayout | None:
    """The training layout at local `path` (a NeMo file or directory, a DeepSpeed ZeRO
    checkpoint, an Orbax checkpoint), or None."""
    if path.endswith(".nemo") and os.path.isfile(path):
        return "nemo"
    if not os.path.isdir(path):
        return None

    def has(*parts: str) -> bool:
        return os.path.exists(os.path.join(path, *parts))

    if has("model_weights.ckpt") or has("weights", ".metadata"):
        from weightstore.training._nemo import is_nemo_checkpoint

        if is_nemo_checkpoint(path):
            return "nemo"
    if has("latest") or _ZERO_TAG.fullmatch(os.path.basename(os.path.normpath(path))):
        from weightstore.training._zero import is_zero_checkpoint

        if is_zero_checkpoint(path):
            return "zero"
    if any(has(marker) for marker in _ORBAX_MARKERS) or _has_orbax_item(path):
        from weightstore.training._orbax import is_orbax_checkpoint

        if is_orbax_checkpoint(path):
            return "orbax"
    return None


def _has_orbax_item(path: str) -> bool:
    """A step folder of Orbax's ``CheckpointManager``: its items are folders of their own. An
    entry that cannot be looked at (a symlink loop, a name the file system refuses) is none."""
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_dir() and os.path.isfile(os.path.join(entry.path, "_METADATA")):
                        return True
                except (OSError, ValueError):
                    continue
    except (OSError, ValueError):
        return False
    return False


def open_training(path: str, layout: TrainingLayout, **options: Any) -> Any:
    """The reader of the `layout` checkpoint at `path`; `options` the reader takes
    (``mode``; ``weights`` for ZeRO) are passed on, the others (a format's) dropped.

    Raises:
        InvalidOptionError: ``weights`` other than ``"fp32"`` for a layout that is no ZeRO
            checkpoint (only ZeRO keeps two sets of weights).
    """
    mode = options.get("mode", "mmap")
    weights = options.get("weights", "fp32")
    if weights != "fp32" and layout != "zero":
        from weightstore.errors import InvalidOptionError

        raise InvalidOptionError(
            f"weights={weights!r} applies to a DeepSpeed ZeRO checkpoint; {path} is {layout}",
            option="weights",
        )
    if layout == "nemo":
        from weightstore.training._nemo import open_nemo

        return open_nemo(path, mode=mode)
    if layout == "zero":
        from weightstore.training._zero import open_zero

        return open_zero(path, weights=weights, mode=mode)
    from weightstore.training._orbax import open_orbax

    return open_orbax(path)
