"""What each rank runs to train a small model one step with DeepSpeed on the CPU and save ZeRO
checkpoints, for the tests of reading them without torch or DeepSpeed (test_zero.py).

One process group saves every case in `CASES`, each under its own folder of the root: a
DeepSpeed import and a group start cost more than a save.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import torch
from torch import nn

CASES: Final = ((1, "bf16"), (2, "bf16"), (2, "fp32"), (3, "bf16"))
"""(ZeRO stage, training dtype) of each checkpoint saved. The CPU here has no fp16 kernels
(``torch.ops.mkldnn._is_mkldnn_fp16_supported()`` is False), so DeepSpeed refuses fp16; fp32
training writes the optimizer files without the ``bf16_`` prefix."""


WIDE_STAGES: Final = (2, 3)
"""ZeRO stages of the checkpoints of `Wide`, saved by 2 ranks only (fp32 training)."""
WIDE_SHAPE: Final = (192, 320)


def case_name(stage: int, dtype: str) -> str:
    return f"stage{stage}-{dtype}"


def wide_name(stage: int) -> str:
    return f"wide-stage{stage}"


class Tiny(nn.Module):
    """Odd sizes, so that partitions pad on 2 ranks; a frozen layer, a buffer and a tied weight,
    so that every kind of entry zero_to_fp32 rebuilds is there."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 7)
        self.hidden = nn.Linear(7, 13)
        self.frozen = nn.Linear(13, 5)
        self.frozen.requires_grad_(False)
        self.head = nn.Linear(7, 11, bias=False)
        self.head.weight = self.embed.weight  # tied: saved once, named twice
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 5))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens)
        out = self.frozen(torch.relu(self.hidden(hidden))) * self.scale
        return out.sum() + self.head(hidden).sum()


class Wide(nn.Module):
    """Two matrices large beside the files' pickles, for counting what a resharded load reads:
    one split by rows, one by columns."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = nn.Parameter(torch.randn(WIDE_SHAPE))
        self.cols = nn.Parameter(torch.randn(WIDE_SHAPE))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return (self.rows[tokens] * self.cols[tokens]).sum()


def save_all(rank: int, world_size: int, root_text: str, extensions_dir: str) -> None:
    """Save every case of `CASES` under `root_text`, on this group's ranks."""
    os.environ.update(
        DS_ACCELERATOR="cpu",
        TORCH_EXTENSIONS_DIR=extensions_dir,  # the op DeepSpeed builds with gcc, built once
        LOCAL_RANK=str(rank),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
    )
    for stage, dtype in CASES:
        _save(rank, Path(root_text) / case_name(stage, dtype), stage, dtype, Tiny)
    if world_size == 2:
        for stage in WIDE_STAGES:
            _save(rank, Path(root_text) / wide_name(stage), stage, "fp32", Wide)


def _save(rank: int, folder: Path, stage: int, dtype: str, build: type[nn.Module]) -> None:
    import deepspeed

    torch.manual_seed(5)
    model = build()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decayed = ("weight", "rows")
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in trainable if n.endswith(decayed)], "weight_decay": 0.1},
            {"params": [p for n, p in trainable if not n.endswith(decayed)], "weight_decay": 0},
        ],
        lr=0.01,
    )  # two parameter groups, so that each rank's file holds two flat partitions
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,  # torch's AdamW: no fused op to build
        "steps_per_print": 1000,
    }
    if dtype == "bf16":
        config["bf16"] = {"enabled": True}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    tokens = torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(rank))
    engine.backward(engine(tokens))
    engine.step()
    engine.save_checkpoint(str(folder))
