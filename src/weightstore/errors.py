"""The weightstore exception family.

Every deliberate error derives from `WeightstoreError` and, where it fits, from the builtin it
resembles, so callers can catch ours or keep their old handlers::

    WeightstoreError
    ├── FormatError (ValueError)            a file's bytes break its format
    │   ├── HeaderError                     header too short, bad magic
    │   ├── UnsupportedVersionError         a version newer than we read
    │   ├── MetadataError                   CBOR/JSON/pickle metadata that does not decode
    │   ├── DescriptorError                 a tensor descriptor that lies (offsets, shape, dtype)
    │   ├── LimitExceeded                   a claimed size over a reader limit
    │   └── TruncatedError (EOFError)       the file ends before what it claims
    ├── UnsupportedFormatError (ValueError) a file that is not a format we read
    ├── DTypeError (TypeError)              a dtype a format or an array type cannot hold
    ├── TensorNotFoundError (KeyError)      a name that is not in the file
    ├── EntryError (ValueError)             a writer was handed a bad tensor entry
    ├── InvalidOptionError (ValueError)     a builder option that cannot work (bad regex, ...)
    └── DestinationExistsError (FileExistsError)  a save would overwrite a file

Messages follow one shape: ``<file>[, tensor '<name>']: <what went wrong>``. Facts travel as
attributes (`path`, `tensor`) so tests and callers never parse text.
"""

from __future__ import annotations

__all__ = [
    "DTypeError",
    "DescriptorError",
    "DestinationExistsError",
    "EntryError",
    "FormatError",
    "HeaderError",
    "InvalidOptionError",
    "LimitExceeded",
    "MetadataError",
    "TensorNotFoundError",
    "TruncatedError",
    "UnsupportedFormatError",
    "UnsupportedVersionError",
    "WeightstoreError",
]


def _where(path: str | None, tensor: str | None) -> str:
    parts = [path or "<memory>"]
    if tensor is not None:
        parts.append(f"tensor {tensor!r}")
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

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


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
            f"{what} is {found:,}, over the limit of {limit:,}; "
            "the file is damaged or hostile (raise the limit only for files you trust)",
            path=path,
            tensor=tensor,
        )


class TruncatedError(FormatError, EOFError):
    """The file ends before the bytes its header or descriptors promise."""

    def __init__(
        self,
        what: str,
        expected: int,
        found: int,
        *,
        path: str | None = None,
        tensor: str | None = None,
    ) -> None:
        self.what, self.expected, self.found = what, expected, found
        super().__init__(
            f"{what} needs {expected:,} bytes but only {found:,} are there; the file is truncated",
            path=path,
            tensor=tensor,
        )


class UnsupportedFormatError(WeightstoreError, ValueError):
    """The input is not a file format weightstore reads (or not this one)."""


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


class InvalidOptionError(WeightstoreError, ValueError):
    """A builder or function option that cannot work; raised at the call that set it."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        self.path = None
        self.tensor = None
        ValueError.__init__(self, detail)


class DestinationExistsError(WeightstoreError, FileExistsError):
    """A save would replace an existing file and overwriting was not allowed."""

    def __init__(self, path: str) -> None:
        super().__init__("file exists; pass overwrite=True to replace it", path=path)

    def __str__(self) -> str:
        return WeightstoreError.__str__(self)
