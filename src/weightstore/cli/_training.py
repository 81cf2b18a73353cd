"""Training checkpoints on the command line: which tensors are the model's and which the
optimizer's. torchtitan, torchtune and FSDP2 save both into one DCP directory, the model under
``model.`` (or at the top level) and the optimizer state under ``optim.`` or ``optimizer.``;
`inspect` shows the groups and `convert` writes the model's tensors unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = ["OPTIMIZER_PREFIXES", "TRAINING_GROUPS", "group_counts", "training_group"]

OPTIMIZER_PREFIXES: Final = ("optim.", "optimizer.")
"""Where the trainers put optimizer state (torchtune, FSDP2's ``get_state_dict``: ``optim``;
torchtitan: ``optimizer``)."""
_OTHER_PREFIXES: Final = ("lr_scheduler.", "lr_schedulers.", "scheduler.", "dataloader.",
                          "train_state.", "rng_state.")  # fmt: skip
TRAINING_GROUPS: Final = ("model", "optimizer", "other")
"""The groups `inspect` shows, in its order."""


def training_group(name: str) -> str:
    """``"optimizer"``, ``"other"`` (schedulers, data loaders, RNG and train state), or
    ``"model"`` (``model.`` or the top level) for the tensor `name`."""
    if name.startswith(OPTIMIZER_PREFIXES):
        return "optimizer"
    if name.startswith(_OTHER_PREFIXES):
        return "other"
    return "model"


def group_counts(names_and_sizes: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """Tensors and bytes per group, for the groups that hold any; empty when every tensor
    is the model's (nothing to tell apart)."""
    counts = {group: (0, 0) for group in TRAINING_GROUPS}
    for name, nbytes in names_and_sizes:
        group = training_group(name)
        tensors, total = counts[group]
        counts[group] = (tensors + 1, total + nbytes)
    if counts["optimizer"][0] == 0 and counts["other"][0] == 0:
        return {}
    return {group: count for group, count in counts.items() if count[0]}
