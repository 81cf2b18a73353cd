"""The weightstore exception family.

Every deliberate error derives from `WeightstoreError` and, where it fits, from the builtin it
resembles, so callers can catch ours or keep their old handlers::

    WeightstoreError
    ├── FormatError (ValueError)            a file's bytes break its format
    │   ├── HeaderError                     header too short, bad magic
    │   ├── UnsupportedVersionError         a version newer than we read
    │   ├── MetadataError                   CBOR/JSON/pickle metadata that does not decode
    │   │   └── PickleError                 a pickle stream that breaks the pickle machine's rules
    │   ├── DescriptorError                 a tensor descriptor that lies (offsets, shape, dtype)
    │   │   ├── MissingStorageError         a tensor whose storage the file does not hold
    │   │   └── QuantizedLayoutError        a quantized group's parts that disagree (scale shape)
    │   ├── LimitExceeded                   a claimed size over a reader limit
    │   ├── TruncatedError (EOFError)       the file ends before what it claims
    │   ├── ArchiveError                    the zip or tar container around the data is damaged
    │   └── SetError                        a sharded set's index or shards break the set's rules
    │       └── SetMismatchError            a shard belongs to another save than the index
    ├── UnsupportedFormatError (ValueError) a file that is not a format we read
    │   ├── NotWeightsError                 bytes that are no weights at all (an HTML page, ...)
    │   │   └── LfsPointerError             a git-lfs pointer where the file should be
    │   ├── UnsupportedObjectError          an object (quantized tensor, ...) we cannot represent
    │   │   └── QuantizedTensorError        a torch quantized tensor asked for as plain values
    │   └── CodeObjectError                 a pickle naming globals that torch.load would run
    ├── DTypeError (TypeError)              a dtype a format or an array type cannot hold
    ├── TensorNotFoundError (KeyError)      a name that is not in the file
    │   └── KeyNotFoundError                a top-level key or entry that is not in the file
    ├── EntryError (ValueError)             a writer was handed a bad tensor entry
    ├── QuantizeError (ValueError)          values a quantized block type cannot encode
    ├── InvalidOptionError (ValueError)     a builder option that cannot work (bad regex, ...)
    │   └── ModuleTypeNeededError           a module type an adapter needs, unsettled
    ├── RemapCollisionError (ValueError)    key remapping sends two tensors to one name
    ├── DestinationExistsError (FileExistsError)  a save would overwrite a file
    ├── SaveFailedError (OSError)           a save could not write its file (disk full, ...)
    ├── RemoteReadError (OSError)           a range request for a remote object's bytes failed
    ├── CredentialsMissingError (PermissionError)  an object store found no credentials to sign with
    ├── FileMissingError (FileNotFoundError)      a file to read does not exist
    │   └── SplitPartMissingError           a part of a split GGUF model is missing
    ├── PathIsDirectoryError (IsADirectoryError)  a directory where one file is expected
    ├── NotAFileError (OSError)             a FIFO, socket, device or symlink loop, not a file
    ├── SliceError (IndexError)             a slice index out of range or of a kind not supported
    ├── SnapshotLoadError (RuntimeError)    a snapshot's source failed or gave the wrong shape
    ├── DigestError (ValueError)            a digest that cannot be checked (algorithm, JSON)
    │   └── DigestMismatchError             a tensor's or file's bytes differ from its digest
    └── LoadFailedError (ValueError)        a load broke one of its rules; `result` is the report

    SetWarning (UserWarning)                a set's load leaves out files that look like its own

Every error and warning class the package lets out is defined here (tests/test_package.py
holds it); the exceptions that never leave a module (a pickle stand-in's refusal, ...) stay
private beside their code.

Messages follow one shape: ``<file>[, tensor '<name>']: <what went wrong>``. Facts travel as
attributes (`path`, `tensor`) so tests and callers never parse text.
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar, Final

from weightstore.base._render import bounded_int, bounded_repr

__all__ = [
    "ArchiveError",
    "CodeObjectError",
    "CredentialsMissingError",
    "DTypeError",
    "DescriptorError",
    "DestinationExistsError",
    "DigestError",
    "DigestMismatchError",
    "EntryError",
    "FileMissingError",
    "FormatError",
    "HeaderError",
    "InvalidOptionError",
    "KeyNotFoundError",
    "LfsPointerError",
    "LimitExceeded",
    "LoadFailedError",
    "MetadataError",
    "MissingStorageError",
    "ModuleTypeNeededError",
    "NotAFileError",
    "NotWeightsError",
    "PathIsDirectoryError",
    "PickleError",
    "QuantizeError",
    "QuantizedLayoutError",
    "QuantizedTensorError",
    "RemapCollisionError",
    "RemoteReadError",
    "SaveFailedError",
    "SetError",
    "SetMismatchError",
    "SetWarning",
    "SliceError",
    "SnapshotLoadError",
    "SplitPartMissingError",
    "TensorNotFoundError",
    "TruncatedError",
    "UnsupportedFormatError",
    "UnsupportedObjectError",
    "UnsupportedVersionError",
    "WeightstoreError",
]


MAX_NAME_IN_MESSAGE: Final = 300  # characters of a tensor name shown in a message


def _where(path: str | None, tensor: str | None) -> str:
    parts = [path or "<memory>"]
    if tensor is not None:  # a file chooses its names: a 1 MiB name must not make a 1 MiB message
        parts.append(f"tensor {bounded_repr(tensor, limit=MAX_NAME_IN_MESSAGE)}")
    return ", ".join(parts)


class WeightstoreError(Exception):
    """Root of every error weightstore raises on purpose.

    Attributes:
        path: the file (or ``None`` for in-memory data) the error is about.
        tensor: the tensor name, when one is at fault.
        detail: the message without its location prefix.
    """

    def __init__(self, detail: str, *, path: str | None = None, tensor: str | None = None):
        self.path = path
        self.tensor = tensor
        self.detail = detail
        super().__init__(f"{_where(path, tensor)}: {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the instance it is, not by calling the class again: subclasses take other
        constructor arguments than their message, and an error that cannot be unpickled breaks
        whatever carries it between processes (`torch.distributed.checkpoint` sends a failing
        rank's exception to the others, `multiprocessing` a worker's)."""
        return _rebuilt, (type(self), self.args, self.__dict__)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _rebuilt(
    kind: type[WeightstoreError], args: tuple[object, ...], state: dict[str, object]
) -> WeightstoreError:
    """An error of type `kind` with exactly the message and attributes it was pickled with."""
    error = kind.__new__(kind)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


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


class DTypeError(WeightstoreError, TypeError):
    """A dtype that a format, NumPy, or the requested conversion cannot hold."""


class TensorNotFoundError(WeightstoreError, KeyError):
    """A tensor name that the file does not contain."""

    def __init__(self, tensor: str, *, path: str | None = None, known: int = 0) -> None:
        super().__init__(f"no such tensor (the file holds {known:,})", path=path, tensor=tensor)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return WeightstoreError.__str__(self)


class EntryError(WeightstoreError, ValueError):
    """A writer was handed an entry it cannot write: wrong byte length, duplicate name, ..."""


class QuantizeError(WeightstoreError, ValueError):
    """Values that a quantized block type cannot encode (NaN, infinity, a partial block), or a
    block type there is no quantizer for."""


class InvalidOptionError(WeightstoreError, ValueError):
    """A builder or function option that cannot work; raised at the call that set it.

    Attributes:
        option: the option at fault (``"top_level_key"``), when one is.
        format: the format that cannot honour it (``"burnpack"``), when that is the reason.
    """

    def __init__(
        self, detail: str, *, option: str | None = None, format: str | None = None
    ) -> None:
        self.detail = detail
        self.path = None
        self.tensor = None
        self.option = option
        self.format = format
        ValueError.__init__(self, detail)


class DestinationExistsError(WeightstoreError, FileExistsError):
    """A save would replace an existing file and overwriting was not allowed.

    Every save refuses to replace a file unless asked: on a store or a record with the builder
    ``.overwrite()``, on a low-level writer (``writer.save``, ``write_file``) with
    ``overwrite=True``. The message names both, the builder first.
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            "file exists; to replace it, call .overwrite() on the store or record "
            "(a writer's save and write_file take overwrite=True)",
            path=path,
        )

    def __str__(self) -> str:
        return WeightstoreError.__str__(self)


class SaveFailedError(WeightstoreError, OSError):
    """A save could not write its file: the disk or a quota is full, the file is over a size
    limit, the filesystem is read-only, the directory is missing. Raised in place of the bare
    `OSError`, which named the scratch file or nothing; this one names the destination.

    Whatever the cause, an existing file at the destination keeps its old bytes and no scratch
    file is left. `errno`, `strerror` and `filename` are set as the builtin's are (``ENOSPC``,
    ``"No space left on device"``, the destination), so `OSError` handlers keep working.

    Attributes:
        path: the destination the save was writing.
        errno: the system error number (`errno.ENOSPC`, `errno.EFBIG`, ...), ``None`` when the
            underlying error carried none.
    """

    # What to do, by errno; an errno not listed gets no advice.
    _ADVICE: ClassVar[dict[int, str]] = {
        errno.ENOSPC: "free some space and save again",
        errno.EDQUOT: "the disk quota is used up; free some space and save again",
        errno.EFBIG: (
            "the file is larger than one file may be here (ulimit -f, or the filesystem's "
            "maximum); raise the limit or save elsewhere"
        ),
        errno.EROFS: "the filesystem is read-only; save elsewhere",
        errno.EACCES: "the directory is not writable; check its permissions",
        errno.ENOENT: "the directory does not exist; create it first",
    }

    def __init__(self, path: str, code: int | None, reason: str | None = None) -> None:
        reason = reason or (os.strerror(code) if code is not None else "unknown error")
        name = errno.errorcode.get(code, str(code)) if code is not None else None
        detail = f"could not save, {reason[:1].lower()}{reason[1:]}"
        detail += f" ({name})" if name else ""
        detail += "; an existing file keeps its old bytes and no partial copy is left"
        advice = self._ADVICE.get(code) if code is not None else None
        super().__init__(f"{detail}; {advice}" if advice else detail, path=path)
        self.errno, self.strerror, self.filename = code, reason, path


class RemoteReadError(WeightstoreError, OSError):
    """A request for bytes of a remote object failed (after the filesystem's own retries), or
    the store answered it with other bytes than asked for.

    Attributes:
        path: the URL.
        offset, size: the byte range asked for.
    """

    def __init__(self, url: str, offset: int, size: int, reason: str) -> None:
        self.offset, self.size = offset, size
        super().__init__(
            f"reading bytes [{bounded_int(offset)}, {bounded_int(offset + size)}) failed: {reason}",
            path=url,
        )


class CredentialsMissingError(WeightstoreError, PermissionError):
    """An object store (S3) found no credentials to sign a request with, or not all of them,
    or a profile that does not exist. The message says where credentials come from, since the
    store's own words ("Unable to locate credentials") name neither the environment variables
    nor the option keys.

    Attributes:
        path: the URL.
        reason: what the store's client said.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"no S3 credentials ({reason}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE) in the environment, or pass the storage options key and secret "
            "(on the command line: --storage-option key=ID --storage-option secret=SECRET); "
            "anon=true reads a public bucket, and endpoint_url (or AWS_ENDPOINT_URL_S3) "
            "reaches an S3 API other than AWS",
            path=url,
        )

    def __str__(self) -> str:
        return WeightstoreError.__str__(self)


class FileMissingError(WeightstoreError, FileNotFoundError):
    """A file to read does not exist; raised when it is first read, since the same path may
    be a save target.

    `errno` and `filename` are set as the builtin's are (``ENOENT``, the path), so handlers
    written for `FileNotFoundError` keep working.

    Attributes:
        path: the file that was looked for (after the format's extension rule).
        reason: why no file can be there, when the name itself says so (it holds a NUL or a
            character the filesystem encoding cannot encode); None for a plain missing file.
    """

    def __init__(self, path: str, reason: str | None = None) -> None:
        self.reason = reason
        detail = "does not exist" if reason is None else f"cannot exist: the name {reason}"
        super().__init__(detail, path=path)
        self.errno, self.strerror, self.filename = errno.ENOENT, self.detail, path


class SplitPartMissingError(FileMissingError):
    """A part of a split GGUF model (``<name>-00002-of-00003.gguf``) does not exist: the part
    opened names the others by its own name and ``split.count``, and one is not there (a
    download that stopped early, a part left out of a copy).

    Attributes:
        path: the missing part.
        part: its number, 1-based, as its name spells it.
        count: how many parts the model has.
        opened: the part that was opened, whose name and ``split.count`` point at this one.
    """

    def __init__(self, path: str, *, part: int, count: int, opened: str) -> None:
        self.part, self.count, self.opened = part, count, opened
        self.reason = None
        WeightstoreError.__init__(
            self,
            f"does not exist: it is part {part:,} of the {count:,} parts of the split GGUF "
            f"model {opened} belongs to, and every part is needed (a download or copy that "
            "stopped early?)",
            path=path,
        )
        self.errno, self.strerror, self.filename = errno.ENOENT, self.detail, path


class PathIsDirectoryError(WeightstoreError, IsADirectoryError):
    """A path names a directory where one file is expected: a container reader reads one file.
    A sharded set (a folder of shards and their index) is read through a store
    (``SafetensorsStore.from_file(directory)``) or `weightstore.sets.open_set`.

    `errno` and `filename` are set as the builtin's are (``EISDIR``, the path).

    Attributes:
        path: the directory.
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            "is a directory, not a file; a reader opens one file (open a sharded set in a "
            "directory with a store's from_file or weightstore.sets.open_set)",
            path=path,
        )
        self.errno, self.strerror, self.filename = errno.EISDIR, self.detail, path


class NotAFileError(WeightstoreError, OSError):
    """A path names something other than a regular file where one file is expected: a FIFO
    (opening it would wait for a writer forever), a socket, a device, a symlink loop.
    Refused before it is opened (`weightstore.io._local`); a directory has its own error,
    `PathIsDirectoryError`.

    `filename` is set as the builtin's is (the path); `errno` is ``ELOOP`` for a symlink
    loop, else None (no system error was raised: the file was never opened).

    Attributes:
        path: the path as given.
        kind: what is there instead (``"a FIFO"``, ``"a socket"``, ``"a character device"``,
            ``"a block device"``, ``"a symlink loop"``).
    """

    def __init__(self, path: str, kind: str) -> None:
        self.kind = kind
        super().__init__(f"is {kind}, not a file", path=path)
        loop = kind == "a symlink loop"
        self.errno = errno.ELOOP if loop else None
        self.strerror, self.filename = self.detail, path


class RemapCollisionError(WeightstoreError, ValueError):
    """Key remapping (or index mapping) gives two different tensors the same new name.

    Burn keeps whichever tensor it meets last, so the loaded model depends on iteration order;
    we refuse instead and name both sources so the rule can be fixed.

    Attributes:
        new: the name both tensors would receive.
        first, second: the two original names, in input order.
        cause: the rewrite that merged them (``"remapping"``, ``"skipping enum variants"``).
    """

    def __init__(
        self,
        new: str,
        first: str,
        second: str,
        *,
        path: str | None = None,
        cause: str = "remapping",
    ) -> None:
        self.new, self.first, self.second, self.cause = new, first, second, cause
        self.path, self.tensor = path, None
        self.detail = (
            f"{cause} gives {first!r} and {second!r} the same name {new!r}; "
            "change the patterns so that every name stays unique"
        )
        ValueError.__init__(self, f"{path}: {self.detail}" if path else self.detail)


class SliceError(WeightstoreError, IndexError):
    """An index into a lazily sliced tensor that is out of range or of a kind we do not read.

    Raised before any tensor byte is read, naming the file and tensor; NumPy raises `IndexError`
    for the same indices, so existing handlers keep working.
    """


# -- appended for the PyTorch reader ----------------------------------------------------------


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


class KeyNotFoundError(TensorNotFoundError):
    """A top-level key (or other entry name) that the file does not hold.

    Attributes:
        key: the key asked for.
        available: the keys that do exist at that level, in file order.
    """

    def __init__(
        self, key: str, available: list[str], *, path: str | None = None, what: str = "key"
    ) -> None:
        self.key, self.available = key, list(available)
        shown = ", ".join(repr(name) for name in available[:20])
        more = f" and {len(available) - 20:,} more" if len(available) > 20 else ""
        listing = f"the file has {shown}{more}" if available else "the file has no keys there"
        WeightstoreError.__init__(self, f"{what} {key!r} not found; {listing}", path=path)


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


class SnapshotLoadError(WeightstoreError, RuntimeError):
    """A snapshot's data could not be produced (its source failed or returned the wrong thing)."""


def _hex_shown(digest: str) -> str:
    """A digest as written: plain when it is hex of a digest's length, else quoted and
    bounded (the file chose it)."""
    if 0 < len(digest) <= 128 and all(c in "0123456789abcdefABCDEF" for c in digest):
        return digest
    return bounded_repr(digest, limit=80)


class DigestError(WeightstoreError, ValueError):
    """A digest the file carries cannot be checked: an algorithm unknown or not installed, or
    a ``weightstore.digests`` value that is not the JSON docs/integrity.md describes.

    Attributes:
        algorithm: the algorithm named, where one is.
    """

    def __init__(
        self,
        detail: str,
        *,
        path: str | None = None,
        tensor: str | None = None,
        algorithm: str | None = None,
    ) -> None:
        super().__init__(detail, path=path, tensor=tensor)
        self.algorithm = algorithm


class DigestMismatchError(DigestError):
    """A tensor's (or a shard file's) bytes hash to another digest than the file records: the
    bytes changed after the save. Raised before the tensor reaches the caller or the model.

    Attributes:
        expected: the hex digest recorded.
        found: the hex digest of the bytes read.
    """

    def __init__(
        self,
        algorithm: str,
        expected: str,
        found: str,
        *,
        path: str | None = None,
        tensor: str | None = None,
    ) -> None:
        self.expected, self.found = expected, found
        super().__init__(
            f"{algorithm} digest mismatch: expected {_hex_shown(expected)}, found "
            f"{_hex_shown(found)}; the bytes changed after the save",
            path=path,
            tensor=tensor,
            algorithm=algorithm,
        )


class SetWarning(UserWarning):
    """A set's directory holds files a load ignores that look like part of it (a stale single
    file, stray shards), or a shard disagrees with the index about what it holds. The load
    reads the set the index names; the warning says what was left out."""


# -- the load report's verdict ----------------------------------------------------------------


class LoadFailedError(WeightstoreError, ValueError):
    """A load broke one of its rules (`LoadRules`); `result` has every detail.

    When ``result.refused`` is set, the load was refused before anything was written and the
    model is unchanged: every failure names, shapes and dtypes show is found so. Otherwise the
    failure showed only while the model loaded (its own load code decided, or data failed to
    read), and the tensors in ``result.applied`` were written. The message's first line says
    what failed, whether the model changed, and what to do; the summary follows.

    Attributes:
        result: the load report, a `weightstore.ApplyResult` (typed loosely here: the report
            lives layers above the errors, which every layer imports).
        failure: the rule broken: ``"errors"``, ``"nothing_loaded"``, ``"missing"`` or
            ``"unused"``.
        fix: what to do, as the builder calls that do it.
    """

    def __init__(self, result: Any, failure: str, fix: str, *, path: str | None = None) -> None:
        self.result, self.failure, self.fix = result, failure, fix
        what = _FAILURE_TEXT[failure](result)
        super().__init__(f"{what}; {_written_text(result)}; {fix}\n\n{result}", path=path)


def _count(count: int, noun: str) -> str:
    """``"1 tensor"``, ``"2 tensors"``, ``"2 shape mismatches"``."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:,} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def _are(count: int, noun: str) -> str:
    """``"1 tensor is"``, ``"2 tensors are"``."""
    return f"{_count(count, noun)} {'is' if count == 1 else 'are'}"


def _errors_text(result: Any) -> str:
    """``"3 tensors cannot load (2 shape mismatches, 1 dtype mismatch)"``."""
    kinds = Counter(error.kind.replace("_", " ") for error in result.errors)
    listed = ", ".join(_count(number, kind) for kind, number in kinds.items())
    return f"{_count(len(result.errors), 'tensor')} cannot load ({listed})"


def _nothing_text(result: Any) -> str:
    """``"no tensor would load into the model (9 missing from the source)"``."""
    parts = [
        f"{len(result.missing):,} missing from the source" if result.missing else "",
        f"{len(result.skipped):,} filtered out" if result.skipped else "",
        f"{len(result.errors):,} failing the checks" if result.errors else "",
    ]
    verb = "would load" if result.refused else "loaded"
    return f"no tensor {verb} into the model ({', '.join(p for p in parts if p)})"


# What failed, per rule of LoadRules: the start of the error's first line.
_FAILURE_TEXT: Final[dict[str, Callable[[Any], str]]] = {
    "errors": _errors_text,
    "nothing_loaded": _nothing_text,
    "missing": lambda r: f"{_are(len(r.missing), 'model tensor')} missing from the source",
    "unused": lambda r: f"{_are(len(r.unused), 'source tensor')} not in the model",
}


def _written_text(result: Any) -> str:
    """Whether the failed load changed the model."""
    if result.refused is not None:
        return "nothing was written, the model is unchanged"
    if not result.applied:
        return "no tensor was written"
    count = len(result.applied)
    written = f"{_count(count, 'tensor')} {'was' if count == 1 else 'were'}"
    return (
        f"{written} written before this showed (the model's own load code decided it, or data "
        "failed to read): the model is partly loaded"
    )


class ModuleTypeNeededError(InvalidOptionError):
    """An adapter that decides by module type (the PyTorch <-> Burn layout, half precision)
    meets tensors whose owning module their names and shapes do not settle: they fit several
    types the adapter treats differently (a 2-D weight alone: Linear or Embedding), or a Linear
    laid out as the other framework lays it out (a file already converted). Guessing would
    write a file that only looks converted, so the caller names the type
    (`weightstore.adapters.assign_module_types`; ``--module-type`` on the command line).

    Attributes:
        tensors: every tensor at fault, in the source's order; the message names the first.
        candidates: the module types the first may be; empty for a Linear laid out the other
            way.
        misfit: True for a Linear laid out the other way, False for an ambiguous owner.
        subject: the first tensor and what its module holds, as the message shows them
            (``'emb.weight' (a 2-D weight with no bias: Linear or Embedding)``).
        others: the message's note on the rest (`` (2 more: 'a.weight', 'b.weight')``), or
            ``""``; the command line words its own message from `subject` and `others`.
    """

    def __init__(
        self,
        detail: str,
        *,
        tensors: tuple[str, ...],
        candidates: tuple[str, ...],
        misfit: bool,
        subject: str,
        others: str,
    ) -> None:
        super().__init__(detail, option="module_type")
        self.tensors = tensors
        self.candidates = candidates
        self.misfit = misfit
        self.subject = subject
        self.others = others
