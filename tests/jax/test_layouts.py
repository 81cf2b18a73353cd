"""Layout rules into and out of a Flax NNX model: torch-style separate q/k/v weights ``[out, in]``
become one fused ``qkv`` kernel ``[in, 3 * out]`` (Flax's layout) in an abstract model, and the
model saves back to the file's own names and bytes through the plan's inverse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")

import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from weightstore import SafetensorsStore, load_from, save_into  # noqa: E402
from weightstore.adapters import Concat, Layout, LayoutRule, Permute  # noqa: E402

WIDTH = 8

FUSE_TO_FLAX = Layout([
    LayoutRule(
        [r"(.*)\.q_proj\.weight", r"(.*)\.k_proj\.weight", r"(.*)\.v_proj\.weight"],
        ["$1.qkv.kernel"], [Concat(0), Permute((1, 0))], name="torch q/k/v to a flax qkv kernel",
    ),
])  # fmt: skip


class Attention(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.qkv = nnx.Linear(WIDTH, 3 * WIDTH, use_bias=False, rngs=rngs)


class Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.attn = Attention(rngs)
        self.norm = nnx.RMSNorm(WIDTH, rngs=rngs)


def _torch_style() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(5)
    weights = {f"attn.{p}_proj.weight": rng.standard_normal((WIDTH, WIDTH)) for p in "qkv"}
    weights["norm.scale"] = rng.standard_normal(WIDTH)
    return {name: array.astype(np.float32) for name, array in weights.items()}


def test_an_abstract_flax_model_loads_a_fused_kernel_and_saves_back_bit_exact(
    tmp_path: Path,
) -> None:
    source = tmp_path / "torch.safetensors"
    save_into(_torch_style(), SafetensorsStore.from_file(source))
    model = nnx.eval_shape(lambda: Net(nnx.Rngs(0)))
    store = SafetensorsStore.from_file(source).with_from_adapter(FUSE_TO_FLAX)
    plan = store.plan(model)
    assert not plan.problems and not plan.missing
    assert [g.targets for g in plan.groups] == [("attn.qkv.kernel",)]
    result = load_from(model, store)
    assert result.is_success() and result.missing == [] and result.unused == [], result
    parts = _torch_style()
    kernel = model.attn.qkv.kernel.get_value()
    assert isinstance(kernel, jax.Array) and kernel.shape == (WIDTH, 3 * WIDTH)
    want = np.concatenate([parts[f"attn.{p}_proj.weight"] for p in "qkv"]).T
    np.testing.assert_array_equal(np.asarray(kernel), want)
    x = jnp.ones((1, WIDTH))
    np.testing.assert_allclose(  # the fused layer computes q, k and v side by side (XLA's
        np.asarray(model.attn.qkv(x)), np.asarray(x) @ want, rtol=1e-5, atol=1e-5
    )  # dot sums in another order than NumPy's, so the last bit may differ)
    back = SafetensorsStore.from_file(tmp_path / "back.safetensors").with_to_adapter(plan.inverse())
    back.collect_from(model)
    saved = dict(SafetensorsStore.from_file(tmp_path / "back.safetensors").get_all_snapshots())
    assert sorted(saved) == sorted(parts)
    for name, array in parts.items():
        assert saved[name].to_numpy().tobytes() == array.tobytes(), name
