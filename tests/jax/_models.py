"""Twin models for the interop tests: a torch MLP and CNN, and the same networks in Flax NNX
and Linen, attribute for attribute, so that one set of weights computes one function.

Flax convolves NHWC and torch NCHW: the Flax CNNs flatten in torch's channel-first order, so
the Linear after them takes the same weights.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

EPSILON = 1e-5  # torch's norm epsilon; Flax's LayerNorm defaults to 1e-6


class TorchMLP(torch.nn.Module):
    """Embedding, Linear, LayerNorm, Linear: every renamed leaf but the batch statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens).mean(dim=1)
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


class TorchCNN(torch.nn.Module):
    """Conv, BatchNorm, Conv (grouped), Linear: kernels reordered, batch statistics renamed."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 4, 3, groups=2)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # NCHW
        x = torch.relu(self.bn1(self.conv1(images)))
        return self.fc(torch.relu(self.conv2(x)).flatten(1))


class NnxMLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(10, 8, rngs=rngs)
        self.fc1 = nnx.Linear(8, 16, rngs=rngs)
        self.norm = nnx.LayerNorm(16, epsilon=EPSILON, rngs=rngs)
        self.fc2 = nnx.Linear(16, 4, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = self.embed(tokens).mean(axis=1)
        return self.fc2(nnx.relu(self.norm(self.fc1(x))))


class NnxCNN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv1 = nnx.Conv(3, 8, (3, 3), padding="VALID", rngs=rngs)
        self.bn1 = nnx.BatchNorm(8, use_running_average=True, epsilon=EPSILON, rngs=rngs)
        self.conv2 = nnx.Conv(8, 4, (3, 3), padding="VALID", feature_group_count=2, rngs=rngs)
        self.fc = nnx.Linear(4 * 4 * 4, 5, rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:  # NHWC
        x = nnx.relu(self.bn1(self.conv1(images)))
        return self.fc(channels_first_flat(nnx.relu(self.conv2(x))))


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = nn.Embed(10, 8, name="embed")(tokens).mean(axis=1)
        x = nn.relu(nn.LayerNorm(epsilon=EPSILON, name="norm")(nn.Dense(16, name="fc1")(x)))
        return nn.Dense(4, name="fc2")(x)


class LinenCNN(nn.Module):
    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:  # NHWC
        x = nn.Conv(8, (3, 3), padding="VALID", name="conv1")(images)
        x = nn.relu(nn.BatchNorm(use_running_average=True, epsilon=EPSILON, name="bn1")(x))
        x = nn.Conv(4, (3, 3), padding="VALID", feature_group_count=2, name="conv2")(x)
        return nn.Dense(5, name="fc")(channels_first_flat(nn.relu(x)))


def channels_first_flat(x: jax.Array) -> jax.Array:
    """NHWC flattened in torch's NCHW order."""
    return x.transpose(0, 3, 1, 2).reshape(x.shape[0], -1)


def torch_model(kind: str) -> torch.nn.Module:
    """A torch twin with seeded weights and batch statistics that are not the defaults."""
    torch.manual_seed(0)
    model = TorchMLP() if kind == "mlp" else TorchCNN()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d | torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model.eval()


def nnx_model(kind: str, seed: int | None = None) -> nnx.Module:
    """An NNX twin: abstract (``nnx.eval_shape``, no arrays) when `seed` is None, else filled
    with seeded values. Filled from NumPy rather than initialised: Flax's initialisers
    compile a random-number kernel per shape, seconds on a busy machine."""
    abstract = nnx.eval_shape(lambda: NnxMLP(nnx.Rngs(0)) if kind == "mlp" else NnxCNN(nnx.Rngs(0)))
    if seed is None:
        return abstract
    graph, state = nnx.split(abstract)
    return nnx.merge(graph, _filled(state, seed))


def linen_model(kind: str) -> nn.Module:
    return LinenMLP() if kind == "mlp" else LinenCNN()


def torch_input(kind: str) -> np.ndarray[Any, Any]:
    """The input both twins see, in torch's layout."""
    generator = np.random.default_rng(0)
    if kind == "mlp":
        return generator.integers(0, 10, size=(3, 5))
    return generator.standard_normal((2, 3, 8, 8)).astype(np.float32)


def flax_input(kind: str) -> jax.Array:
    data = torch_input(kind)
    return jnp.asarray(data if kind == "mlp" else data.transpose(0, 2, 3, 1))


def torch_output(model: torch.nn.Module, kind: str) -> np.ndarray[Any, Any]:
    with torch.no_grad():
        output: np.ndarray[Any, Any] = model(torch.from_numpy(torch_input(kind))).numpy()
    return output


def linen_variables(kind: str, seed: int | None = 2) -> Any:
    """Linen variables (a plain dict of dicts): abstract ``ShapeDtypeStruct`` leaves when
    `seed` is None, else seeded values."""
    abstract = jax.eval_shape(linen_model(kind).init, jax.random.key(0), flax_input(kind))
    return abstract if seed is None else _filled(abstract, seed)


def _filled(tree: Any, seed: int) -> Any:
    """`tree` with every abstract leaf replaced by seeded values (a variance stays positive)."""
    generator = np.random.default_rng(seed)

    def fill(path: Any, leaf: Any) -> Any:
        low, high = (0.5, 1.5) if "var" in jax.tree_util.keystr(path) else (-0.3, 0.3)
        return jnp.asarray(generator.uniform(low, high, leaf.shape).astype(leaf.dtype))

    return jax.tree_util.tree_map_with_path(fill, tree)
