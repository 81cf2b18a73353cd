"""A quantized tensor as one thing: its codes, their companions, its scheme, its logical form.

Containers that are not quantized formats (SafeTensors, PyTorch, burnpack) store a quantized
tensor as several ordinary tensors tied by a naming convention: FP8 codes in ``weight`` and
their block scales in ``weight_scale_inv``, gpt-oss's ``*_blocks`` and ``*_scales``. A
`QuantizedGroup` names them together, so that a reader can list the group as one entry, a
filter or a rename can move it whole, and a dequantization kernel gets every part it needs.
Recognising groups (by a checkpoint's ``quantization_config`` or by names, dtypes and shapes)
and dequantizing them are the layouts' work; this is only the record they share.
"""

from __future__ import annotations

from collections.abc import Mapping

from weightstore.base._record import ValueRecord

__all__ = ["QuantizedGroup"]


class QuantizedGroup(ValueRecord):
    """One quantized tensor stored as several.

    Attributes:
        name: the logical tensor's name (``"model.layers.0.mlp.down_proj.weight"``).
        layout: the layout's short name (``"fp8-block"``, ``"mxfp4"``, ``"nvfp4"``,
            ``"int-pack"``, ``"int8"``, ``"fp8-tensor"``, ``"fp8-channel"``, ``"torch-affine"``,
            ``"burn"``).
        codes: the stored tensor holding the codes.
        companions: role -> stored tensor name (``{"scale": "...weight_scale_inv"}``); roles
            are the layout's own (``scale``, ``zero_point``, ``global_scale``, ``shape``,
            ``g_idx``, ``input_scale``).
        logical_shape: the dequantized tensor's shape, outermost first.
        block: elements per scale along each dim (``(128, 128)`` for DeepSeek's FP8 blocks,
            ``(1, 32)`` for MXFP4), or ``()`` for one scale per tensor.
        rule: how the group was recognised, for the report (``"quantization_config:
            fp8 block 128x128"``, ``"names: *_blocks + *_scales"``).
    """

    name: str
    layout: str
    codes: str
    companions: Mapping[str, str]
    logical_shape: tuple[int, ...]
    block: tuple[int, ...]
    rule: str

    @property
    def parts(self) -> tuple[str, ...]:
        """Every stored tensor of the group: the codes first, then the companions by role."""
        return (self.codes, *(self.companions[role] for role in sorted(self.companions)))
