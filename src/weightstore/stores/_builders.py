"""The builders of a store: each returns a copy with one option changed, checked at once.

`Store` inherits them; what they share is `_with` (the copy, and the check that the format can
honour the option, `ContainerFormat.store_options`), which `Store` defines. A bad regex, a bad
metadata value or an option the format cannot honour raises `InvalidOptionError` at the
builder call, never at load time.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from weightstore.errors import InvalidOptionError
from weightstore.stores._groups import dequantize_dtype
from weightstore.stores._options import StoreOptions, typed_metadata_value
from weightstore.stores._ties import checked_ties

if TYPE_CHECKING:
    from weightstore.adapters import Adapter
    from weightstore.container._format import ContainerFormat
    from weightstore.paths import KeyRemapper, PathFilter, PathPredicate

__all__ = ["StoreBuilders"]

BuilderT = TypeVar("BuilderT", bound="StoreBuilders")


class StoreBuilders:
    """The option builders of `Store` (see the module docstring)."""

    _options: StoreOptions
    _path: str | None  # None: a store in memory

    def _with(self: BuilderT, **changes: Any) -> BuilderT:
        """A copy with `changes` made to the options; `Store` defines it."""
        raise NotImplementedError

    @classmethod
    def _format(cls) -> ContainerFormat:
        """The store's format; `Store` defines it."""
        raise NotImplementedError

    def with_regex(self: BuilderT, pattern: str) -> BuilderT:
        """Keep tensors whose path matches `pattern` (OR with the other criteria)."""
        return self._with(filter=self._options.filter.with_regex(pattern))

    def with_regexes(self: BuilderT, patterns: Iterable[str]) -> BuilderT:
        """Keep tensors whose path matches any of `patterns`."""
        return self._with(filter=self._options.filter.with_regexes(patterns))

    def with_full_path(self: BuilderT, path: str) -> BuilderT:
        """Keep the tensor named exactly `path`."""
        return self._with(filter=self._options.filter.with_full_path(path))

    def with_full_paths(self: BuilderT, paths: Iterable[str]) -> BuilderT:
        """Keep the tensors named exactly as in `paths`."""
        return self._with(filter=self._options.filter.with_full_paths(paths))

    def with_predicate(self: BuilderT, predicate: PathPredicate) -> BuilderT:
        """Keep tensors for which ``predicate(path, container_path)`` is true."""
        return self._with(filter=self._options.filter.with_predicate(predicate))

    def filter(self: BuilderT, path_filter: PathFilter) -> BuilderT:
        """Replace the filter; an empty filter means no filtering."""
        return self._with(filter=path_filter)

    def match_all(self: BuilderT) -> BuilderT:
        """Keep every tensor (a filter that matches everything)."""
        return self._with(filter=self._options.filter.match_all())

    def with_key_remapping(self: BuilderT, pattern: str, replacement: str) -> BuilderT:
        """Rename tensors matching `pattern`, on load and on save; rules chain in order."""
        return self._with(remapper=self._options.remapper.add_pattern(pattern, replacement))

    def remap(self: BuilderT, remapper: KeyRemapper) -> BuilderT:
        """Replace the remapping rules with `remapper`'s."""
        return self._with(remapper=remapper)

    def allow_partial(self: BuilderT, allow: bool = True) -> BuilderT:
        """Return the report instead of raising when model tensors are missing from the file."""
        return self._with(allow_partial=allow)

    def validate(self: BuilderT, validate: bool = True) -> BuilderT:
        """Raise on shape, dtype and load errors (default); off, they are only reported."""
        return self._with(validate=validate)

    def overwrite(self: BuilderT, overwrite: bool = True) -> BuilderT:
        """Let a save replace an existing file (atomically); off, it raises instead."""
        return self._with(overwrite=overwrite)

    def durable(self: BuilderT, durable: bool = True) -> BuilderT:
        """Fsync a saved file and its directory so the save survives power loss (default).

        ``durable(False)`` skips both fsyncs and keeps the atomic scratch-file-then-rename: a
        crashed process still leaves the old file or the whole new one, but after a power
        loss the new name may hold bytes that never reached the disk. For files that can be
        written again, such as checkpoints of a run that is itself lost with the machine.
        """
        return self._with(durable=durable)

    def with_metadata(self: BuilderT, key: str, value: Any) -> BuilderT:
        """Add a metadata pair to saves (the same key replaces the earlier value). A format
        with typed metadata (GGUF) also takes ints, floats, bools, lists of them and
        `weightstore.gguf.GgufValue` (docs/gguf.md); the others, strings only.

        Raises:
            InvalidOptionError: the key or value is not a `str`.
        """
        typed = self._format().typed_metadata and typed_metadata_value(value)
        if not isinstance(key, str) or not (isinstance(value, str) or typed):
            what = "str -> str or a GGUF value" if self._format().typed_metadata else "str -> str"
            raise InvalidOptionError(
                f"metadata must be {what}, got {key!r}: {value!r}", option="metadata"
            )
        return self._with(metadata={**self._options.metadata, key: value})

    def metadata(self: BuilderT, key: str, value: str) -> BuilderT:
        """Deprecated alias of `with_metadata`, kept for one release."""
        _deprecated("metadata", "with_metadata")
        return self.with_metadata(key, value)

    def clear_metadata(self: BuilderT) -> BuilderT:
        """Drop every metadata pair, the defaults included."""
        return self._with(metadata={})

    def with_from_adapter(self: BuilderT, adapter: Adapter) -> BuilderT:
        """Adapter applied to file tensors as they load into the model."""
        return self._with(from_adapter=adapter)

    def with_to_adapter(self: BuilderT, adapter: Adapter) -> BuilderT:
        """Adapter applied to model tensors as they are saved."""
        return self._with(to_adapter=adapter)

    def skip_enum_variants(self: BuilderT, skip: bool = True) -> BuilderT:
        """Match file paths without their Burn enum-variant segments (``feature.BaseConv.w`` is
        looked up as ``feature.w``); two file tensors that would meet then raise."""
        return self._with(skip_enum_variants=skip)

    def map_indices_contiguous(self: BuilderT, enabled: bool = True) -> BuilderT:
        """Renumber list indices 0, 1, 2... on both sides before matching names."""
        return self._with(map_indices_contiguous=enabled, map_indices_except=None)

    def map_indices_contiguous_except(self: BuilderT, pattern: str) -> BuilderT:
        """Like `map_indices_contiguous`, but lists whose prefix matches `pattern` keep theirs."""
        from weightstore.paths import map_indices_contiguous_except

        map_indices_contiguous_except([], pattern)  # compiles now: a bad regex fails here
        return self._with(map_indices_contiguous=True, map_indices_except=pattern)

    def with_top_level_key(self: BuilderT, key: str) -> BuilderT:
        """Read the tensors under `key` of a checkpoint's top-level dict (``"state_dict"``); a
        dotted path (``"state_dict.model"``) reads a nested dict's, unless a key is spelled
        exactly so."""
        return self._with(top_level_key=key)

    def allow_objects(self: BuilderT, allow: bool = True) -> BuilderT:
        """Read a checkpoint whose pickle names globals that ``torch.load`` would run
        (``os.system``, ``builtins.eval``), as inert data; by default such a file raises
        `CodeObjectError`. A user's own classes (a whole-module save) need no permission."""
        return self._with(allow_objects=allow)

    def auto_extension(self: BuilderT, enabled: bool = True) -> BuilderT:
        """Give extensionless paths the format's extension (``model`` -> ``model.bpk``)."""
        return self._with(auto_extension=enabled)

    def dedupe_tied(self: BuilderT, enabled: bool = True) -> BuilderT:
        """Save a tensor tied under several names once, under its first name in the model's
        order (the default for SafeTensors, as transformers' ``save_pretrained`` saves;
        ``dedupe_tied(False)`` writes every name). Loads fill them again (`with_tied_weights`)."""
        return self._with(dedupe_tied=enabled)

    def with_tied_weights(self: BuilderT, ties: Mapping[str, str]) -> BuilderT:
        """Fill each model tensor `ties` names (``{"lm_head.weight":
        "model.embed_tokens.weight"}``) from the source tensor it maps to, when the source
        lacks it: a checkpoint saved with its tied head left out, loaded into a model whose
        head is a tensor of its own. The report lists each in ``tied``.

        By default a ``config.json`` beside a local file or set that says
        ``tie_word_embeddings`` fills a missing ``lm_head.weight`` from the input embedding
        (`_ties.ties_for_load`); ``with_tied_weights({})`` turns that off.

        Raises:
            InvalidOptionError: a name that is no str.
        """
        return self._with(tied_weights=checked_ties(ties))

    def with_max_shard_size(self: BuilderT, size: int | str) -> BuilderT:
        """Save a sharded set into the store's path, a directory (created if missing), with at
        most `size` bytes of tensor data per shard: an int, or decimal text as the Hugging Face
        tools write it (``"5GB"`` = 5 * 10**9 bytes; ``"5GiB"`` = 5 * 2**30). A tensor larger
        than `size` gets a shard of its own; a model that fits in one shard is saved as the
        single file (``model.safetensors``), as huggingface_hub does.

        A save to a path that is an existing directory writes a set without this option, in
        shards of at most "5GB".

        Raises:
            InvalidOptionError: `size` is no size (``"5Gb"``, 0, ...), or the store is in memory.
        """
        from weightstore.sets._size import parse_size

        nbytes = parse_size(size)
        if self._path is None:
            raise InvalidOptionError(
                "a sharded set is a directory of files; open the store with from_file",
                option="max_shard_size",
            )
        return self._with(max_shard_size=nbytes)

    def max_shard_size(self: BuilderT, size: int | str) -> BuilderT:
        """Deprecated spelling of `with_max_shard_size`, kept for one release."""
        _deprecated("max_shard_size", "with_max_shard_size")
        return self.with_max_shard_size(size)

    def with_digests(
        self: BuilderT, algorithm: str | None = None, *, index_tensors: bool = False
    ) -> BuilderT:
        """Make saves write a digest of each tensor's bytes into the file's metadata
        (``weightstore.digests``, docs/integrity.md), which loads and `get` then check as they
        read. `algorithm`: ``xxh3_128`` (the default when the `xxhash` package is installed,
        else ``sha256``), ``blake3``, ``sha256`` (the Hub's LFS oids) or ``blake2b``. A set's
        index lists every shard file's digest, and every tensor's with `index_tensors`.

        Raises:
            InvalidOptionError: an unknown algorithm, or one whose package is missing.
        """
        from weightstore.errors import DigestError
        from weightstore.io._digest import default_algorithm, new_hasher

        chosen = default_algorithm() if algorithm is None else algorithm
        try:
            new_hasher(chosen)
        except DigestError as err:
            raise InvalidOptionError(err.detail, option="digests") from None
        return self._with(digests=chosen, index_tensor_digests=index_tensors)

    def verify_digests(self: BuilderT, verify: bool = True) -> BuilderT:
        """Check the digests a file carries as its tensors are read (the default); off,
        loads and `get` read without hashing (docs/integrity.md)."""
        return self._with(verify_digests=verify)

    def with_quantize(self: BuilderT, ggml_type: str | None) -> BuilderT:
        """Quantize float tensors of two or more dims to `ggml_type` (``"q8_0"`` or
        ``"q4_0"``, bit-exact with gguf-py) on save; tensors whose rows are not whole
        32-element blocks, and 1-D ones (norms, biases, as llama.cpp keeps them), stay as they
        are, and tensors read quantized from a GGUF file keep their blocks. None: no quantizing.
        GGUF stores only (docs/gguf.md).

        Raises:
            InvalidOptionError: another type, or a format that stores no quantized blocks.
        """
        if ggml_type is not None and ggml_type.upper() not in ("Q8_0", "Q4_0"):
            raise InvalidOptionError(
                f"quantize to {ggml_type!r}: weightstore quantizes to q8_0 or q4_0",
                option="quantize",
            )
        return self._with(quantize=None if ggml_type is None else ggml_type.upper())

    def with_io(self: BuilderT, mode: str) -> BuilderT:
        """How local files are read (docs/io.md): ``"auto"`` (the default) maps a file on a
        local disk and reads by pread one on a network or FUSE file system, or one larger than
        the memory available; ``"mmap"``, ``"pread"`` and ``"direct"`` (``O_DIRECT``, the
        page cache bypassed; pread where the file system refuses it) as asked. The choice and
        its reason are the report's ``io``. URLs read by range requests whatever it says.

        Raises:
            InvalidOptionError: another mode.
        """
        from weightstore.io._engine import check_io_mode

        return self._with(io=check_io_mode(mode))

    def with_dequantize(self: BuilderT, dtype: Any = "bf16") -> BuilderT:
        """Read each quantized tensor (FP8, MXFP4, NVFP4 and int pack-quantized groups, torch
        quantized tensors, Burn QFloat) as one tensor of its values in `dtype` (``"bf16"``,
        ``"f16"`` or ``"f32"``), under its logical name; a load into a 16-bit float
        parameter decodes straight to that dtype, one tensor at a time. None: read groups
        as their stored parts (the default), which a float model refuses. docs/quantized.md.

        Raises:
            InvalidOptionError: another dtype.
        """
        return self._with(dequantize=None if dtype is None else dequantize_dtype(dtype))

    def with_variant(self: BuilderT, name: str | None) -> BuilderT:
        """Read and write a sharded set's variant, as transformers' ``variant=`` names it:
        ``model.fp16-00001-of-00002.safetensors`` and ``model.safetensors.index.fp16.json``
        (``model.fp16.safetensors`` when unsharded); None for the plain names. A directory
        holding several variants is read as the one named here.

        Raises:
            InvalidOptionError: `name` is not letters, digits and underscores.
        """
        from weightstore.sets._layout import layout_for

        if name is not None:
            try:  # the layout owns the naming rule
                layout_for(self._format().name).single_name(name)
            except (ValueError, TypeError):
                raise InvalidOptionError(
                    f"a variant is letters, digits and underscores, not {name!r}",
                    option="variant",
                ) from None
        return self._with(variant=name)

    def variant(self: BuilderT, name: str | None) -> BuilderT:
        """Deprecated spelling of `with_variant`, kept for one release."""
        _deprecated("variant", "with_variant")
        return self.with_variant(name)


def _deprecated(old: str, new: str) -> None:
    """Warn that builder `old` is spelled `new` now, pointing at the caller's line."""
    warnings.warn(f"Store.{old} is deprecated; use Store.{new}", DeprecationWarning, stacklevel=3)
