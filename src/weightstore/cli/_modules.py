"""``convert``'s module types: the library's inference, with the command's rules and wording.

The layout and half-precision adapters act by the type of the module owning each tensor; a
file does not record it, so `weightstore.adapters.assign_module_types` infers it from names
and shapes, as a model-free `save_into` does. The command adds its ``--module-type
PATTERN=TYPE`` rules, words a refusal by the flags typed (``--to-burn treats them
differently; name it with --module-type ...``), and gives every tensor a type (Burn's
``Unknown`` where none applies), so that the save sees every type settled. A ``config.json``
beside the source (`ModelConfig.beside`) lets inference type a Hugging Face model by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from weightstore.adapters import Adapter, ModelConfig, ModuleTypeRule, assign_module_types
from weightstore.cli._errors import about
from weightstore.errors import ModuleTypeNeededError
from weightstore.snapshot import TensorSnapshot

__all__ = ["typed_for_command"]

_UNKNOWN_OWNER: Final = ("Unknown",)  # Burn's container type for "no module": adapters pass it


def typed_for_command(
    snapshots: Sequence[TensorSnapshot],
    adapter: Adapter,
    module_types: Iterable[tuple[str, str]],
    flags: str,
    config: ModelConfig | None = None,
) -> list[TensorSnapshot]:
    """`snapshots` with their owner's type for `adapter` (asked for by `flags`), the
    ``--module-type`` pairs overriding; ``Unknown`` where none applies.

    The snapshots come from a store: any container they carry is the store's own inference,
    made for no adapter in particular, so the command infers again for its own, with the
    source's `config` when it has one.

    Raises:
        InvalidOptionError: a ``--module-type`` regex does not compile (named by the flag).
        ModuleTypeNeededError: an owner `adapter` cannot settle, worded by `flags`.
    """
    with about("--module-type"):
        rules = [ModuleTypeRule.from_regex(regex, kind) for regex, kind in module_types]
    untyped = [snapshot.replace(container=()) for snapshot in snapshots]
    try:
        owned = assign_module_types(untyped, adapter, rules, config=config)
    except ModuleTypeNeededError as refused:
        raise _worded(refused, flags) from None
    return [s if s.container else s.replace(container=_UNKNOWN_OWNER) for s in owned]


def _worded(refused: ModuleTypeNeededError, flags: str) -> ModuleTypeNeededError:
    """The library's refusal in the command's words: the flags typed, ``--module-type``."""
    if refused.misfit:
        detail = (
            f"{refused.subject} is a Linear laid out the other way than {flags} expects; is the "
            f"file already converted? (--module-type names the type to override){refused.others}"
        )
    else:
        detail = (
            f"cannot tell which module owns {refused.subject}, and {flags} treats them "
            f"differently; name it with --module-type 'PATTERN=TYPE'{refused.others}"
        )
    return ModuleTypeNeededError(
        detail, tensors=refused.tensors, candidates=refused.candidates, misfit=refused.misfit,
        subject=refused.subject, others=refused.others,
    )  # fmt: skip
