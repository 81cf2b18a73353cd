"""The declared stores: one per registered format, each fixing the format and its defaults.

Everything a store does lives in `Store`; these only say which `FORMAT` record they stand
for and where their defaults depart from the base (Burn's store defaults, which differ per
format). Departures from Burn, all deliberate: an empty filter means "no filter" everywhere,
invalid regexes raise at once, remapping applies to burnpack saves too, and the PyTorch store's
from-adapter is the identity, since our models are PyTorch already.
"""

from __future__ import annotations

from weightstore import burnpack, gguf, pytorch_reader, safetensors
from weightstore.base._render import bounded_repr
from weightstore.errors import InvalidOptionError
from weightstore.stores._base import Store
from weightstore.stores._options import StoreOptions

__all__ = ["BurnpackStore", "GgufStore", "PytorchStore", "SafetensorsStore"]


class BurnpackStore(Store):
    """Burn's `.bpk` files, in a file, in memory, or viewed in place; loads and saves.

    A path without an extension means ``<path>.bpk``, as in Burn (`auto_extension`).

    Example:
        >>> BurnpackStore.from_file("model").allow_partial().apply_to(model)  # doctest: +SKIP
    """

    FORMAT = burnpack.FORMAT


class SafetensorsStore(Store):
    """SafeTensors files, in a file or in memory, interchangeable with the safetensors package.

    Paths are taken as written. A tensor tied under several names (a head tied to the input
    embedding) is saved once, under its first name, as huggingface_hub and transformers save
    it (``dedupe_tied(False)``: every name); loads fill the names left out (`with_tied_weights`).
    """

    FORMAT = safetensors.FORMAT

    @classmethod
    def _defaults(cls) -> StoreOptions:
        return super()._defaults().replace(dedupe_tied=True)


class PytorchStore(Store):
    """PyTorch `.pt`/`.pth`/`.bin` checkpoints, read without torch; load only.

    Defaults as Burn's: contiguous index mapping and enum-variant skipping are on, since
    `nn.Sequential` numbering leaves gaps and torch paths carry no enum variants.
    """

    FORMAT = pytorch_reader.FORMAT

    @classmethod
    def _defaults(cls) -> StoreOptions:
        return StoreOptions(map_indices_contiguous=True, skip_enum_variants=True)

    def with_weights_from(self, weights: str) -> PytorchStore:
        """Which weights a DeepSpeed ZeRO checkpoint gives: ``"fp32"`` (the default), the fp32
        master weights rebuilt from the optimizer partitions as ``zero_to_fp32`` rebuilds
        them, or ``"model-states"``, the module's own weights in the training dtype (stages 1
        and 2). Refused, when the store opens, for a source that is no ZeRO checkpoint.

        Raises:
            InvalidOptionError: `weights` is neither.
        """
        if weights not in ("fp32", "model-states"):
            raise InvalidOptionError(
                f"weights must be 'fp32' or 'model-states', not {bounded_repr(weights)}",
                option="weights_from",
            )
        return self._with(weights_from=weights)


class GgufStore(Store):
    """GGUF files (llama.cpp's), in a file or in memory; loads and saves.

    A quantized tensor loads dequantized to its model parameter's float dtype (bf16 stays
    bf16); saves write plain types, quantize with `with_quantize`, and keep the blocks of
    tensors read quantized from a GGUF file (docs/gguf.md).
    """

    FORMAT = gguf.FORMAT
