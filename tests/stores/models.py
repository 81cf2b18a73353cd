"""Small torch models used by the store tests."""

from __future__ import annotations

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.norm = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.norm(self.conv(x))).flatten(1))


class TinyTransformer(nn.Module):
    """Attention, layer norm, and an output projection tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        attended, _ = self.attn(x, x, x)
        return self.head(self.norm(x + attended))


def sequential() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.0), nn.Linear(8, 2), nn.Tanh())


def inputs_for(model: nn.Module) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    if isinstance(model, Mlp):
        return torch.randn(3, 6, generator=generator)
    if isinstance(model, Cnn):
        return torch.randn(2, 2, 6, 6, generator=generator)
    if isinstance(model, TinyTransformer):
        return torch.randint(0, 20, (2, 5), generator=generator)
    return torch.randn(3, 4, generator=generator)
