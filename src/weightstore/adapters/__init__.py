"""Adapters that transform snapshots between frameworks' conventions, lazily.

`PyTorchToBurnAdapter` / `BurnToPyTorchAdapter` convert layouts, `HalfPrecisionAdapter` and
`FloatCastAdapter` convert precision; ``a.chain(b)`` combines any two.
"""

from __future__ import annotations

from weightstore.adapters._base import Adapter, ChainAdapter, IdentityAdapter
from weightstore.adapters._layout import BurnToPyTorchAdapter, PyTorchToBurnAdapter
from weightstore.adapters._module_types import NORMALIZATION_TYPES, burn_module_type
from weightstore.adapters._precision import (
    DEFAULT_HALF_PRECISION_MODULES,
    FloatCastAdapter,
    HalfPrecisionAdapter,
)

__all__ = [
    "DEFAULT_HALF_PRECISION_MODULES",
    "NORMALIZATION_TYPES",
    "Adapter",
    "BurnToPyTorchAdapter",
    "ChainAdapter",
    "FloatCastAdapter",
    "HalfPrecisionAdapter",
    "IdentityAdapter",
    "PyTorchToBurnAdapter",
    "burn_module_type",
]
