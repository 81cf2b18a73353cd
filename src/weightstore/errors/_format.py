"""Errors about a file's bytes: a format broken, a file no format we read, an object we
cannot represent."""

from __future__ import annotations

import os
from typing import Final

from weightstore.base._render import bounded_int, bounded_repr
from weightstore.errors._base import MAX_NAME_IN_MESSAGE, WeightstoreError


class FormatError(WeightstoreError, ValueError):
    """A file's bytes break the rules of its format."""


class HeaderError(FormatError):
    """The fixed-size header is missing, short, or carries the wrong magic number."""


class UnsupportedVersionError(FormatError):
    """The file declares a format version newer than this reader understands."""

    def __init__(self, found: int, supported: int, *, path: str | None = None) -> None:
        self.found, self.supported = found, supported
        super().__init__(
            f"format version is {found}, newest supported is {supported}; upgrade weightstore",
            path=path,
        )


class MetadataError(FormatError):
    """The metadata block (CBOR, JSON or pickle) does not decode or has the wrong shape."""


class DescriptorError(FormatError):
    """A tensor descriptor is inconsistent: offsets, shape, dtype, duplicates or overlaps."""


class QuantizedLayoutError(DescriptorError):
    """The stored tensors of one quantized group disagree with each other or with the layout:
    scales whose shape is not the one the codes' blocks imply, a scale dtype outside the
    scheme, codes of the wrong dtype, a missing part. Raised when a group is recognised and
    again before a dequantization allocates anything, so a damaged checkpoint never loads
    codes as weights or scales the wrong blocks. A `DescriptorError`: the group's tensors
    describe a tensor that cannot be.

    Attributes:
        group: the logical tensor's name (``"model.layers.0.mlp.down_proj.weight"``).
        codes: the stored tensor holding the codes.
        companion: the companion at fault (the scale, ...), when one is.
    """

    def __init__(
        self,
        detail: str,
        *,
        group: str,
        codes: str,
        companion: str | None = None,
        path: str | None = None,
    ) -> None:
        self.group, self.codes, self.companion = group, codes, companion
        shown = f"codes {bounded_repr(codes, limit=MAX_NAME_IN_MESSAGE)}"
        if companion is not None:
            shown += f", {bounded_repr(companion, limit=MAX_NAME_IN_MESSAGE)}"
        super().__init__(f"quantized group ({shown}): {detail}", path=path, tensor=group)


class LimitExceeded(FormatError):
    """A file claims more than a reader accepts; raised before anything is allocated."""

    def __init__(
        self,
        what: str,
        found: int,
        limit: int,
        *,
        path: str | None = None,
        tensor: str | None = None,
    ) -> None:
        self.what, self.found, self.limit = what, found, limit
        super().__init__(
            f"{what} is {bounded_int(found)}, over the limit of {bounded_int(limit)}; "
            "the file is damaged or hostile (raise the limit only for files you trust)",
            path=path,
            tensor=tensor,
        )


class TruncatedError(FormatError, EOFError):
    """The file ends before the bytes its header or descriptors promise: most often a partial
    download or copy. The message says how many bytes are missing, and names the unfinished
    download lying beside the file when there is one (`unfinished_download`).

    Attributes:
        what: the part that is cut. expected, found: the bytes it needs, and those there.
        at_least: `expected` is a lower bound (a zip cut before its directory says more).
        incomplete: the unfinished download of the file (a Hugging Face ``*.incomplete``
            file), when one lies beside it; None otherwise.
    """

    def __init__(
        self,
        what: str,
        expected: int,
        found: int,
        *,
        path: str | None = None,
        tensor: str | None = None,
        at_least: bool = False,
    ) -> None:
        self.what, self.expected, self.found, self.at_least = what, expected, found, at_least
        self.incomplete = unfinished_download(path)
        bound = "at least " if at_least else ""
        missing = bounded_int(max(0, expected - found))
        detail = (
            f"{what} needs {bound}{bounded_int(expected)} bytes but only {bounded_int(found)} "
            f"are there ({bound}{missing} missing); the file is truncated"
        )
        if self.incomplete is not None:
            detail += (
                f"; {os.path.basename(self.incomplete)} beside it is an unfinished download: "
                "let it finish, or download the file again"
            )
        super().__init__(detail, path=path, tensor=tensor)


_HF_LOCAL_DIR_DOWNLOADS: Final = os.path.join(".cache", "huggingface", "download")


def unfinished_download(path: str | None) -> str | None:
    """The unfinished download of the local file `path`, when one lies beside it: Hugging
    Face's ``<name>.incomplete`` in the same folder, ``<blob>.incomplete`` in a cache's
    ``blobs/`` for a snapshot's symlink, or ``.cache/huggingface/download/<name>.*.incomplete``
    under a ``local_dir`` download. None for a URL, in-memory data, or nothing there."""
    if not path or "://" in path:
        return None
    try:
        candidates = [f"{path}.incomplete"]
        if os.path.islink(path):
            candidates.append(f"{os.path.realpath(path)}.incomplete")
        folder, name = os.path.split(path)
        downloads = os.path.join(folder, _HF_LOCAL_DIR_DOWNLOADS)
        if os.path.isdir(downloads):
            candidates += sorted(
                os.path.join(downloads, entry)
                for entry in os.listdir(downloads)
                if entry.startswith(f"{name}.") and entry.endswith(".incomplete")
            )
        return next((c for c in candidates if os.path.isfile(c)), None)
    except (OSError, ValueError):  # an unencodable or over-long name: no sibling to name
        return None


class UnsupportedFormatError(WeightstoreError, ValueError):
    """The input is not a file format weightstore reads (or not this one).

    Attributes:
        found: what the bytes are instead (``"safetensors"``, ``"json"``), when recognised.
    """

    def __init__(
        self,
        detail: str,
        *,
        path: str | None = None,
        tensor: str | None = None,
        found: str | None = None,
    ) -> None:
        self.found = found
        super().__init__(detail, path=path, tensor=tensor)


class NotWeightsError(UnsupportedFormatError):
    """A file whose bytes are no weights of any format: empty, an HTML page or a JSON error
    body saved by a failed download, a text file, another tool's format (ONNX, HDF5, NumPy,
    GGUF, TFLite, a zip of something else). Told from the first bytes before any reader
    parses them, so no format's own complaint (a 2 EB header) misleads
    (`weightstore.base._cause`).

    Attributes:
        cause: what the bytes are, as a short key: ``"empty"``, ``"lfs-pointer"``,
            ``"html"``, ``"xml"``, ``"json-error"``, ``"text"``, ``"onnx"``, ``"hdf5"``,
            ``"npy"``, ``"npz"``, ``"gguf"``, ``"ggml"``, ``"tflite"``, ``"zip"``, and the
            compressions (``"gzip"``, ...).
    """

    def __init__(self, detail: str, cause: str, *, path: str | None = None) -> None:
        self.cause = cause
        super().__init__(detail, path=path, found=cause)


class LfsPointerError(NotWeightsError):
    """A git-lfs pointer file where the weights should be: the repository was cloned without
    ``git lfs`` (or with ``GIT_LFS_SKIP_SMUDGE``), so the file holds the pointer's three lines.

    Attributes:
        oid: the pointer's ``sha256:<hex>`` object id; None when the line is missing or bad.
        size: the size of the real file, in bytes; None when the line is missing or bad.
        others: in a set, the other shards that are pointers too (every one is named).
    """

    def __init__(
        self,
        oid: str | None,
        size: int | None,
        *,
        path: str | None = None,
        others: tuple[str, ...] = (),
    ) -> None:
        self.oid, self.size, self.others = oid, size, others
        facts = [f"oid {oid[:19]}..." if oid is not None and len(oid) > 19 else f"oid {oid}"]
        facts = facts if oid is not None else []
        facts += [f"{bounded_int(size)} bytes"] if size is not None else []
        shown = f" ({', '.join(facts)})" if facts else ""
        detail = f"is a git-lfs pointer{shown}, not the file"
        if others:
            names = ", ".join(os.path.basename(other) for other in others[:10])
            more = f" and {len(others) - 10:,} more" if len(others) > 10 else ""
            detail += f"; so are {names}{more}"
        super().__init__(f"{detail}; run `git lfs pull`", "lfs-pointer", path=path)


class PickleError(MetadataError):
    """A pickle stream the symbolic pickle machine refuses: an unknown opcode, a stack underflow,
    a memo reference to nothing, a constructor called with arguments it cannot take.

    Attributes:
        offset: byte position of the opcode in its pickle stream, when known.
        opcode: the opcode's name (``"BINPUT"``), when known.
    """

    def __init__(
        self,
        detail: str,
        *,
        offset: int | None = None,
        opcode: str | None = None,
        path: str | None = None,
    ) -> None:
        self.offset, self.opcode = offset, opcode
        where = "" if offset is None else f" at byte {bounded_int(offset)}"
        what = f"pickle opcode {opcode}{where}" if opcode else f"pickle{where}"
        super().__init__(f"{what}: {detail}", path=path)


class MissingStorageError(DescriptorError):
    """A tensor refers to a storage the file does not hold; raised instead of returning zeros.

    Attributes:
        key: the storage key the tensor refers to (``"0"`` for ``data/0`` in a zip checkpoint).
    """

    def __init__(self, key: str, *, path: str | None = None, tensor: str | None = None) -> None:
        self.key = key
        super().__init__(f"storage {key!r} is not in the file", path=path, tensor=tensor)


class ArchiveError(FormatError):
    """The zip or tar container around a checkpoint is damaged: a bad local header, a CRC
    mismatch, an entry that is missing or not a plain file.

    Attributes:
        entry: the archive entry at fault, when one is.
    """

    def __init__(self, detail: str, *, entry: str | None = None, path: str | None = None) -> None:
        self.entry = entry
        super().__init__(detail if entry is None else f"entry {entry!r}: {detail}", path=path)


class UnsupportedObjectError(UnsupportedFormatError):
    """A value the file builds with a constructor we cannot represent without running it
    (quantized or sparse tensors, ...).

    Attributes:
        global_name: the dotted name of the constructor, ``"torch._utils._rebuild_qtensor"``.
    """

    def __init__(
        self, global_name: str, reason: str, *, path: str | None = None, tensor: str | None = None
    ) -> None:
        self.global_name = global_name
        super().__init__(
            f"built by {global_name} ({reason}), which cannot be represented without torch",
            path=path,
            tensor=tensor,
        )


class QuantizedTensorError(UnsupportedObjectError):
    """A torch quantized tensor (``torch.quantize_per_tensor``, ``torch.ao`` weights) asked for
    as a plain array: its stored values are integer codes, which are no weights until
    dequantized, so `get` refuses rather than hand codes out as values. The PyTorch reader's
    ``quantized_codes``, ``quantized_info`` and ``get_dequantized`` read it.

    Attributes:
        scheme: torch's qscheme name, ``"per_tensor_affine"``, ``"per_channel_affine"`` or
            ``"per_channel_affine_float_qparams"``.
        torch_dtype: ``"qint8"``, ``"quint8"`` or ``"qint32"``.
    """

    def __init__(
        self, scheme: str, torch_dtype: str, *, path: str | None = None, tensor: str | None = None
    ) -> None:
        self.scheme = scheme
        self.torch_dtype = torch_dtype
        self.global_name = "torch._utils._rebuild_qtensor"
        what = (
            f"not a quantized tensor but a {torch_dtype} one; get(name) reads it"
            if scheme == "none"
            else f"a quantized {torch_dtype} tensor ({scheme}, built by {self.global_name}) "
            "holds integer codes, not values: "
            "get_dequantized(name) gives its values as torch's dequantize() does, "
            "quantized_codes(name) its codes, quantized_info(name) its scales and zero points"
        )
        UnsupportedFormatError.__init__(self, what, path=path, tensor=tensor)


class CodeObjectError(UnsupportedFormatError):
    """A checkpoint whose pickle names globals that would run code if ``torch.load`` loaded it
    (``os.system``, ``builtins.eval``; `weightstore.pytorch_reader._policy`). Nothing ran;
    the file is refused unless objects are allowed (``Store.allow_objects()``,
    ``--allow-objects``).

    Attributes:
        global_names: the dotted names found, in the file's order.
        where: the place of the first one (``"config.hook"``; ``""``: the whole file).
        complete: False when the scan stopped at its limit (then there may be more, or the
            names are empty and the file is refused for hiding them).
    """

    def __init__(
        self,
        global_names: tuple[str, ...],
        where: str,
        *,
        complete: bool = True,
        path: str | None = None,
    ) -> None:
        self.global_names = global_names
        self.where = where
        self.complete = complete
        shown = ", ".join(bounded_repr(name, limit=80)[1:-1] for name in global_names[:5])
        more = len(global_names) - 5
        place = "(the whole file)" if not where else bounded_repr(where, limit=80)
        what = f"names {shown}{f' and {more:,} more' if more > 0 else ''} at {place}"
        if not complete:
            stopped = "the scan of its objects stopped early"
            what = f"{what}; {stopped}" if global_names else f"is too large to scan: {stopped}"
        super().__init__(
            f"the pickle {what}, which torch.load would import and may run (nothing ran); "
            "allow objects (Store.allow_objects(), --allow-objects) only for a file you trust",
            path=path,
        )


class SetError(FormatError):
    """A sharded checkpoint set breaks its rules: an index that is not the JSON it should be,
    a shard name that leaves the directory, a tensor claimed by two shards, a shard the index
    names but the directory lacks. `path` is the index (or directory), `tensor` the tensor at
    fault where one is.

    Attributes:
        shard: the shard file at fault, where one is.
    """

    def __init__(
        self,
        detail: str,
        *,
        path: str | None = None,
        tensor: str | None = None,
        shard: str | None = None,
    ) -> None:
        super().__init__(detail, path=path, tensor=tensor)
        self.shard = shard


class SetMismatchError(SetError):
    """A shard carries another set id than its index: the directory mixes two saves (another
    tool rewrote shards in place, or files were copied between sets). Never loaded silently."""
