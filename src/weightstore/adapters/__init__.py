"""Adapters that transform snapshots between frameworks' conventions, lazily.

`PyTorchToBurnAdapter` / `BurnToPyTorchAdapter` convert between torch's and Burn's parameter
conventions (Linear weights transposed, norm parameters renamed), `PyTorchToFlaxAdapter` /
`FlaxToPyTorchAdapter` and `BurnToFlaxAdapter` / `FlaxToBurnAdapter` between theirs and Flax's
(kernels laid out, norm and embedding parameters renamed), `HalfPrecisionAdapter` and
`FloatCastAdapter` convert precision; ``a.chain(b)`` combines any two. `Split`, `Concat`,
`Chunk`, `Stack`, `Unstack`, `Permute`, `Interleave`, `Deinterleave` and `Pipeline` are the
operations of fused-layout rules (docs/layouts.md), each with a derived inverse; a
`LayoutRule` binds them to source and target names, and a `Layout` (a set of rules) is an
adapter whose inverse is derived too.

All but `FloatCastAdapter` decide by the type of the module owning each tensor. A model knows
it; for a file, `infer_module_types` reads it from names and shapes, and `assign_module_types`
types snapshots for one adapter, refusing (`ModuleTypeNeededError`) where the adapter would
act on a guess; a Hugging Face model's ``config.json`` (`ModelConfig`) helps type it by name.
"""

from __future__ import annotations

from weightstore.adapters._base import Adapter, ChainAdapter, IdentityAdapter
from weightstore.adapters._inference import (
    ModelConfig,
    ModuleGuess,
    ModuleTypeRule,
    assign_module_types,
    infer_module_types,
    needs_module_types,
)
from weightstore.adapters._layout_ops import (
    Chunk,
    Concat,
    Deinterleave,
    Interleave,
    LayoutOp,
    Permute,
    Pipeline,
    Split,
    Stack,
    Unstack,
)
from weightstore.adapters._layout_presets import LAYOUT_PRESETS, layout_preset
from weightstore.adapters._layout_rewrite import LayoutGroup, LayoutPlan
from weightstore.adapters._layout_rules import Layout, LayoutRule
from weightstore.adapters._module_types import NORMALIZATION_TYPES, burn_module_type
from weightstore.adapters._precision import (
    DEFAULT_HALF_PRECISION_MODULES,
    FloatCastAdapter,
    HalfPrecisionAdapter,
)
from weightstore.adapters._pytorch_burn import BurnToPyTorchAdapter, PyTorchToBurnAdapter
from weightstore.adapters._pytorch_flax import (
    LINEN_COLLECTIONS,
    BurnToFlaxAdapter,
    FlaxToBurnAdapter,
    FlaxToPyTorchAdapter,
    PyTorchToFlaxAdapter,
)

__all__ = [
    "DEFAULT_HALF_PRECISION_MODULES",
    "LAYOUT_PRESETS",
    "LINEN_COLLECTIONS",
    "NORMALIZATION_TYPES",
    "Adapter",
    "BurnToFlaxAdapter",
    "BurnToPyTorchAdapter",
    "ChainAdapter",
    "Chunk",
    "Concat",
    "Deinterleave",
    "FlaxToBurnAdapter",
    "FlaxToPyTorchAdapter",
    "FloatCastAdapter",
    "HalfPrecisionAdapter",
    "IdentityAdapter",
    "Interleave",
    "Layout",
    "LayoutGroup",
    "LayoutOp",
    "LayoutPlan",
    "LayoutRule",
    "ModelConfig",
    "ModuleGuess",
    "ModuleTypeRule",
    "Permute",
    "Pipeline",
    "PyTorchToBurnAdapter",
    "PyTorchToFlaxAdapter",
    "Split",
    "Stack",
    "Unstack",
    "assign_module_types",
    "burn_module_type",
    "infer_module_types",
    "layout_preset",
    "needs_module_types",
]
