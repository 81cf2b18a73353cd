"""Which model tensors a load fills from another source tensor: tied weights the file left out.

transformers' ``save_pretrained`` and huggingface_hub save a tensor tied under two names once;
a language model's ``lm_head.weight``, tied to its input embedding, is then absent from the
file, and the ``config.json`` beside it says ``tie_word_embeddings`` (true unless set false).
A model whose head is a tensor of its own (built untied, converted, a NumPy dict) would then
load with its head missing, left at its initial values. A store's ``with_tied_weights`` names
such ties; without it, they are read from that config (`ties_for_load`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Final

from weightstore.errors import InvalidOptionError
from weightstore.io import is_url

__all__ = ["HEAD_WEIGHT", "INPUT_EMBEDDING", "checked_ties", "ties_for_load"]

HEAD_WEIGHT: Final = "lm_head.weight"
"""The head transformers ties to the input embedding, at the top of its models."""
INPUT_EMBEDDING: Final = re.compile(
    r"(?:.*\.)?(?:embed_tokens|wte|word_embeddings|embed_in|tok_embeddings|shared)\.weight"
)
"""Names (matched whole) of input embeddings: Llama's and BART's ``embed_tokens``, GPT-2's
``wte``, BERT's ``word_embeddings``, GPT-NeoX's ``embed_in``, Llama's original
``tok_embeddings``, T5's and BART's ``shared``; positional embeddings are left out."""


def checked_ties(ties: Mapping[str, str]) -> dict[str, str]:
    """`ties` as a dict, each side a name.

    Raises:
        InvalidOptionError: a name that is no str.
    """
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in ties.items()):
        raise InvalidOptionError("tied weights map model tensor names to source names (str)")
    return dict(ties)


def ties_for_load(
    given: Mapping[str, str] | None,
    path: str | None,
    names: Collection[str],
    absent: Collection[str],
) -> dict[str, str]:
    """The ties a load from `path` (source tensor `names`) applies, `absent` being the model
    tensors the source lacks: `given` when set; else, when ``lm_head.weight`` is absent and a
    local ``config.json`` beside the source says the embeddings are tied, the head from the
    source's input embedding (the one there is, or ``shared`` among several); else none. The
    config is read only then."""
    if given is not None:
        return dict(given)
    if path is None or HEAD_WEIGHT not in absent or HEAD_WEIGHT in names or is_url(path):
        return {}
    embeddings = [name for name in names if INPUT_EMBEDDING.fullmatch(name)]
    if len(embeddings) > 1:
        embeddings = [name for name in embeddings if name.rsplit(".", 2)[-2] == "shared"]
    if len(embeddings) != 1:
        return {}
    from weightstore.adapters._known_models import ModelConfig

    config = ModelConfig.beside(path)
    if config is None or not config.tie_word_embeddings:
        return {}
    return {HEAD_WEIGHT: embeddings[0]}
