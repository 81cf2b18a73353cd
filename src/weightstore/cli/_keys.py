"""What the commands say about a checkpoint beyond its tensors: which top-level keys hold
tensors (and which one to pass as ``--top-level-key``), and the user's classes it holds.

A training checkpoint (``{'model': ..., 'optimizer': ..., 'epoch': 3}``) holds tensors under
several keys; read whole, its optimizer state would be listed and converted with the weights.
`inspect` and `convert` then name the keys and suggest one: the key with the most tensors
among those that do not look like optimizer, scheduler or scaler state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from weightstore.cli._text import plural
from weightstore.pytorch_reader._policy import Scan

if TYPE_CHECKING:
    from weightstore.pytorch_reader import PytorchReader

__all__ = [
    "bundles_training_state",
    "class_warning",
    "keys_text",
    "place",
    "suggested_key",
    "tensor_keys",
]

# Substrings of a top-level key that holds training state, not weights.
_TRAINING_STATE: Final = ("optim", "sched", "scaler", "lr_", "grad")
_SHOWN_KEYS: Final = 5  # keys named in one line; more are counted
_SHOWN_CLASSES: Final = 3  # classes named in one warning line; more are counted


def tensor_keys(reader: PytorchReader) -> dict[str, int]:
    """Tensors under each top-level key of a checkpoint read whole, when it looks like a
    training checkpoint (`bundles_training_state`): several keys hold
    tensors, and one of them is optimizer-like state or some entry holds none (an epoch, the
    arguments). Else empty: a state dict nested by module is not one."""
    root = reader.load_object()
    if not isinstance(root, dict) or len(root) < 2:
        return {}
    keys = {key for key, value in root.items() if isinstance(key, str) and not _is_leaf(value)}
    counts: dict[str, int] = {}
    for name in reader.names():
        head = name.partition(".")[0]
        if head in keys:
            counts[head] = counts.get(head, 0) + 1
    return counts if bundles_training_state(counts, len(root)) else {}


def _is_leaf(value: object) -> bool:
    from weightstore.pytorch_reader import LazyTensor, UnreadableTensor

    return isinstance(value, LazyTensor | UnreadableTensor)


def bundles_training_state(counts: dict[str, int], entries: int) -> bool:
    """Whether tensors under the keys of `counts` (key -> tensors), in a top-level dict of
    `entries` entries, look like weights bundled with training state: several keys hold
    tensors, and one looks like optimizer, scheduler or scaler state, or some entry holds no
    tensor (an epoch, the arguments). A state dict nested by module (``conv``, ``bn``) is none."""
    if len(counts) < 2:
        return False
    return entries > len(counts) or any(_is_training_state(key) for key in counts)


def _is_training_state(key: str) -> bool:
    return any(part in key.lower() for part in _TRAINING_STATE)


def suggested_key(counts: dict[str, int]) -> str | None:
    """The key to suggest as ``--top-level-key`` among `counts` (key -> tensors), or None."""
    if not counts:
        return None
    weights = [key for key in counts if not _is_training_state(key)]
    return max(weights or counts, key=lambda key: counts[key])


def keys_text(counts: dict[str, int]) -> str:
    """``model (4 tensors), optimizer (12 tensors)``: the keys and their tensors, bounded."""
    shown = [
        f"{key} ({plural(count, 'tensor')})" for key, count in list(counts.items())[:_SHOWN_KEYS]
    ]
    more = len(counts) - _SHOWN_KEYS
    return ", ".join(shown) + (f" and {more:,} more keys" if more > 0 else "")


def class_warning(scan: Scan | None) -> str | None:
    """The one-line warning for a file holding a user's classes (a whole-module save), or
    None: they were read as inert data and pass, but ``torch.load`` would import them."""
    if scan is None or not scan.classes:
        return None
    named = [f"{found.qualname} at {place(found.where)}" for found in scan.classes[:_SHOWN_CLASSES]]
    more = len(scan.classes) - _SHOWN_CLASSES
    listed = ", ".join(named) + (f" and {more:,} more" if more > 0 else "")
    return (
        f"holds objects of classes from outside torch and NumPy ({listed}), read as inert "
        "data; torch.load(weights_only=False) would import their modules"
    )


def place(where: str) -> str:
    """Where a value sits, for a message: its dotted path, or ``(the whole file)``."""
    return repr(where) if where else "(the whole file)"
