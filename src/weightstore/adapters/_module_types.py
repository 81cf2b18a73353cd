"""Module type names as adapters key on them: torch class names mapped to Burn's.

Adapters decide by the type of the module that owns a tensor (the last entry of a snapshot's
container). torch and Burn name the same layers differently (``BatchNorm2d`` vs ``BatchNorm``,
``RMSNorm`` vs ``RmsNorm``), and torch subclasses some (attention's out projection is a
``NonDynamicallyQuantizableLinear``). One table normalises them; a class not listed (a user's
own) keeps its own name.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NORMALIZATION_TYPES", "burn_module_type"]

# fmt: off
_TORCH_TO_BURN: Final[dict[str, str]] = {
    "Linear": "Linear", "NonDynamicallyQuantizableLinear": "Linear", "LazyLinear": "Linear",
    "Embedding": "Embedding",
    "Conv1d": "Conv1d", "Conv2d": "Conv2d", "Conv3d": "Conv3d",
    "LazyConv1d": "Conv1d", "LazyConv2d": "Conv2d", "LazyConv3d": "Conv3d",
    "ConvTranspose1d": "ConvTranspose1d", "ConvTranspose2d": "ConvTranspose2d",
    "ConvTranspose3d": "ConvTranspose3d",
    "BatchNorm1d": "BatchNorm", "BatchNorm2d": "BatchNorm", "BatchNorm3d": "BatchNorm",
    "SyncBatchNorm": "BatchNorm", "LazyBatchNorm1d": "BatchNorm",
    "LazyBatchNorm2d": "BatchNorm", "LazyBatchNorm3d": "BatchNorm", "BatchNorm": "BatchNorm",
    "LayerNorm": "LayerNorm", "GroupNorm": "GroupNorm",
    "InstanceNorm1d": "InstanceNorm", "InstanceNorm2d": "InstanceNorm",
    "InstanceNorm3d": "InstanceNorm", "InstanceNorm": "InstanceNorm",
    "RMSNorm": "RmsNorm", "RmsNorm": "RmsNorm",
    "PReLU": "PRelu", "PRelu": "PRelu",
}
# fmt: on

NORMALIZATION_TYPES: Final = frozenset(
    {"BatchNorm", "LayerNorm", "GroupNorm", "RmsNorm", "InstanceNorm"}
)
"""Burn's names of the layers whose ``weight``/``bias`` Burn calls ``gamma``/``beta``.

Burn leaves InstanceNorm out, which makes an affine InstanceNorm's weights unloadable there; we
include it.
"""


def burn_module_type(type_name: str | None) -> str | None:
    """Burn's name for a module type; Burn's own ``Struct:X`` form is accepted too."""
    if type_name is None:
        return None
    bare = type_name.split(":", 1)[1] if ":" in type_name else type_name
    return _TORCH_TO_BURN.get(bare, bare)
