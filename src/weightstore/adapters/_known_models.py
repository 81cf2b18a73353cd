"""What Hugging Face models' names and ``config.json`` tell module-type inference, as tables.

Shapes alone cannot type every layer of a downloaded model (`weightstore.adapters._inference`):

- transformers' ``Conv1D`` (GPT-2's ``c_attn``, ``c_fc``, ``c_proj``) stores its weight
  ``[in, out]``, the transpose of ``nn.Linear``'s and already Burn's Linear layout, so it reads
  as a Linear laid out the other way, and a square one (``attn.c_proj``) as a torch Linear.
- an embedding (BERT's ``word_embeddings``, GPT-2's ``wte``) is a 2-D weight with no bias, as
  a bias-free Linear is.

The tables below settle these by name, and only then; a name they do not hold keeps the shape
rules' answer, ambiguity included:

    module named                         with                                  is
    c_attn, c_fc, c_proj, q_attn         config.json of a Conv1D family, or    Conv1D
                                         every non-square one laid out [in, out]
                                         (a square one with no such evidence:  Linear or Conv1D)
    wte, wpe, embed_tokens, ...,         a 2-D weight and no bias              Embedding
    *_embeddings
    lm_head                              a 2-D weight and no bias, and a       Linear
                                         config.json beside the file

GPT-BigCode and Qwen name their ``nn.Linear`` layers ``c_attn`` and ``c_proj`` too, so a name is
Conv1D only when the config says a Conv1D family, or when the file's own non-square layers of
those names are all laid out ``[in, out]`` (a Linear's are ``[out, in]``).

``config.json`` beside the weights (`ModelConfig.beside`) gives ``architectures`` and
``model_type``; ``tie_word_embeddings`` (default true) says the head shares the input embedding,
so that a tied head is usually absent from the file. Either way a present ``lm_head`` is an
``nn.Linear`` (its weight ``[vocab, hidden]``), which Burn holds transposed. A config that
cannot be read (not a regular file, over `MAX_MODEL_CONFIG_SIZE`, not a JSON object) is not
used: inference falls back on names and shapes, which refuse rather than guess.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Final

from weightstore.base._record import ValueRecord
from weightstore.errors import WeightstoreError
from weightstore.io._source import open_readable

__all__ = [
    "CONV1D_FAMILIES",
    "CONV1D_MODULES",
    "EMBEDDING_MODULE",
    "HEAD_MODULES",
    "MAX_MODEL_CONFIG_SIZE",
    "MODEL_CONFIG_NAME",
    "ModelConfig",
]

MAX_MODEL_CONFIG_SIZE: Final = 16 * 2**20
"""Bytes of a ``config.json`` read beside the weights; a larger one is not used. Real configs
are a few KB; one listing 21,843 ImageNet labels is about 1 MB."""
MODEL_CONFIG_NAME: Final = "config.json"
"""The file transformers' ``save_pretrained`` writes beside the weights."""

CONV1D_MODULES: Final = frozenset({"c_attn", "c_fc", "c_proj", "q_attn"})
"""Names the GPT-2 family gives its transformers ``Conv1D`` layers (``q_attn``: cross-attention)."""
CONV1D_FAMILIES: Final[Mapping[str, tuple[str, ...]]] = {
    "gpt2": ("GPT2",),
    "openai-gpt": ("OpenAIGPT",),
    "imagegpt": ("ImageGPT",),
    "decision_transformer": ("DecisionTransformer",),
}
"""``model_type`` -> prefixes of the ``architectures`` class names of the models built from
transformers' ``Conv1D`` (``GPT2LMHeadModel``); ``GPTBigCode``, ``GPTNeo``... use Linear."""

EMBEDDING_MODULE: Final = re.compile(
    r"wte|wpe|embed_tokens|embed_positions|embed_in|tok_embeddings|embeddings|\w+_embeddings?"
)
"""Module names (matched whole) of embeddings: GPT-2's ``wte``/``wpe``, Llama's and BART's
``embed_tokens``, GPT-NeoX's ``embed_in``, BERT's ``word_embeddings``, ``position_embeddings``
and ``token_type_embeddings``."""
HEAD_MODULES: Final = frozenset({"lm_head"})
"""Names of the language-model heads transformers builds as ``nn.Linear``."""


class ModelConfig(ValueRecord):
    """What a transformers ``config.json`` says that module-type inference uses.

    Attributes:
        architectures: the model classes it was saved from (``("GPT2LMHeadModel",)``).
        model_type: transformers' family name (``"gpt2"``), or None.
        tie_word_embeddings: whether the head shares the input embedding (transformers'
            default: true), so that the file usually lacks ``lm_head.weight``.
    """

    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    tie_word_embeddings: bool = True

    @property
    def names_model(self) -> bool:
        """Whether it says what model it is (``architectures`` or ``model_type``)."""
        return bool(self.architectures or self.model_type)

    @property
    def uses_conv1d(self) -> bool:
        """Whether the model is of a family whose ``c_*`` layers are transformers' Conv1D."""
        if self.model_type in CONV1D_FAMILIES:
            return True
        prefixes = tuple(p for family in CONV1D_FAMILIES.values() for p in family)
        return any(name.startswith(prefixes) for name in self.architectures)

    @classmethod
    def from_json(cls, data: bytes) -> ModelConfig | None:
        """The config in `data`, or None when it is not a UTF-8 JSON object; fields of the
        wrong type are left at their defaults."""
        try:
            value = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        architectures = value.get("architectures")
        if not isinstance(architectures, list):
            architectures = []
        model_type = value.get("model_type")
        tied = value.get("tie_word_embeddings", True)
        return cls(
            tuple(name for name in architectures if isinstance(name, str)),
            model_type if isinstance(model_type, str) else None,
            tied if isinstance(tied, bool) else True,
        )

    @classmethod
    def beside(cls, weights: str) -> ModelConfig | None:
        """The ``config.json`` beside local `weights` (a file, or a set's directory), or None
        when there is none or it cannot be used (not a regular file, a FIFO would block the
        read; over `MAX_MODEL_CONFIG_SIZE`; not a JSON object)."""
        folder = weights if os.path.isdir(weights) else os.path.dirname(weights)
        path = os.path.join(folder, MODEL_CONFIG_NAME)
        try:
            with open_readable(path) as file:  # refuses a FIFO, device... without blocking
                data = file.read(MAX_MODEL_CONFIG_SIZE + 1)
        except (WeightstoreError, OSError):  # absent, no regular file, unreadable
            return None
        if len(data) > MAX_MODEL_CONFIG_SIZE:
            return None
        return cls.from_json(data)
