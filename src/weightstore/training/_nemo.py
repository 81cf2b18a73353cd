"""NeMo checkpoints, opened as the checkpoint they hold, their model config kept as metadata.

NeMo is too large to install for tests, so the layouts are taken from its documented
structure (``SaveRestoreConnector`` for NeMo 1, ``nemo.lightning`` checkpoints for NeMo 2):

- **NeMo 1**: a ``.nemo`` file, an uncompressed tar holding ``model_config.yaml`` and
  ``model_weights.ckpt`` (a ``torch.save`` state dict), members under ``./`` or not; or the
  same two files in a directory (an extracted ``.nemo``). The tar is not extracted: the
  weights member is read in place through a window of the mapped file, so only the zip
  layout (torch >= 1.6) is read so; a gzip-compressed tar is refused, naming the fix.
- **NeMo 2**: a directory with ``weights/`` (a torch DCP checkpoint: ``.metadata`` and
  ``__R_I.distcp``, read by `weightstore.dcp`) and ``context/`` (``model.yaml``).

The config is kept as text under the metadata key ``nemo_config`` (at most
`MAX_CONFIG_SIZE` bytes); YAML is not parsed, so no YAML tag can construct anything.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Final

from weightstore.errors import LimitExceeded, SetError, UnsupportedFormatError
from weightstore.io._source import MmapSource, ReadMode, WindowSource, open_readable

__all__ = ["MAX_CONFIG_SIZE", "NemoReader", "is_nemo_checkpoint", "open_nemo"]

MAX_CONFIG_SIZE: Final = 16 * 2**20
"""Bytes of a model config kept; a real one is a few KB."""
CONFIG_KEY: Final = "nemo_config"
_WEIGHTS: Final = "model_weights.ckpt"
_CONFIG: Final = "model_config.yaml"
_TAR_MAGIC: Final = b"ustar"
_TAR_MAGIC_OFFSET: Final = 257
_GZIP_MAGIC: Final = b"\x1f\x8b"


def is_nemo_checkpoint(path: str) -> bool:
    """Whether `path` is a ``.nemo`` file, an extracted one, or a NeMo 2 checkpoint
    directory; reads names only (and a ``.nemo`` file's name)."""
    if os.path.isdir(path):

        def has(*parts: str) -> bool:
            return os.path.exists(os.path.join(path, *parts))

        return (has(_WEIGHTS) and has(_CONFIG)) or (has("weights", ".metadata") and has("context"))
    return path.endswith(".nemo") and os.path.isfile(path)


def open_nemo(path: str, *, mode: ReadMode = "mmap") -> NemoReader:
    """The checkpoint a NeMo file or directory holds, with its config as metadata.

    Raises:
        UnsupportedFormatError: a compressed ``.nemo``, or one whose weights are no zip
            checkpoint (read in place only so).
        SetError: a ``.nemo`` without ``model_weights.ckpt``.
        LimitExceeded: a config over `MAX_CONFIG_SIZE`.
        FormatError: the weights' own errors.
    """
    if os.path.isdir(path):
        if os.path.isdir(os.path.join(path, "weights")):
            from weightstore.dcp._torch_reader import open_torch_dcp

            config = _file_text(os.path.join(path, "context", "model.yaml"))
            return NemoReader(open_torch_dcp(os.path.join(path, "weights"), mode=mode), config)
        from weightstore.pytorch_reader import PytorchReader

        weights = PytorchReader.from_file(os.path.join(path, _WEIGHTS), mode=mode)
        return NemoReader(weights, _file_text(os.path.join(path, _CONFIG)))
    return _open_tar(path)


def _open_tar(path: str) -> NemoReader:
    from weightstore.pytorch_reader import PytorchReader

    source = MmapSource(path)
    try:
        head = bytes(source.read(0, min(source.size, 512), "the tar header"))
        if head[:2] == _GZIP_MAGIC:
            raise UnsupportedFormatError(
                "is a gzip-compressed .nemo, whose weights cannot be read in place; extract it "
                "(tar -xzf) and open the directory",
                path=path,
            )
        if head[_TAR_MAGIC_OFFSET : _TAR_MAGIC_OFFSET + 5] != _TAR_MAGIC:
            raise UnsupportedFormatError("is no tar archive, so no .nemo file", path=path)
        members = _members(path)
        weights = members.get(_WEIGHTS)
        if weights is None:
            raise SetError(f"the .nemo holds no {_WEIGHTS}", path=path)
        # A window of the mapping, not a view of it: a streaming pass then lets each
        # tensor's pages go (`MmapSource.release_range`) instead of holding the whole member.
        window = WindowSource(source, weights.offset_data, weights.size, f"{path}:{_WEIGHTS}")
        config_member = members.get(_CONFIG)
        config = None
        if config_member is not None:
            if config_member.size > MAX_CONFIG_SIZE:
                raise LimitExceeded(f"size of {_CONFIG}", config_member.size, MAX_CONFIG_SIZE,
                                    path=path)  # fmt: skip
            data = source.read(config_member.offset_data, config_member.size, _CONFIG)
            config = bytes(data).decode("utf-8", "replace")
        reader = PytorchReader(f"{path}:{_WEIGHTS}", source=window)
    except BaseException:
        source.close()
        raise
    return NemoReader(reader, config, closing=source)


def _members(path: str) -> dict[str, tarfile.TarInfo]:
    """The regular-file members by name (``./`` dropped), from the headers alone."""
    try:
        with tarfile.open(path, mode="r:") as archive:
            return {
                member.name.removeprefix("./"): member
                for member in archive.getmembers()
                if member.isreg()
            }
    except tarfile.TarError as err:
        raise SetError(f"the .nemo tar cannot be read: {err}", path=path) from err


def _file_text(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    with open_readable(path) as file:
        size = os.fstat(file.fileno()).st_size
        if size > MAX_CONFIG_SIZE:
            raise LimitExceeded(f"size of {os.path.basename(path)}", size, MAX_CONFIG_SIZE,
                                path=path)  # fmt: skip
        return file.read().decode("utf-8", "replace")


class NemoReader:
    """The reader of the checkpoint inside, with ``nemo_config`` added to its metadata; every
    other attribute is the inner reader's (`names`, `get`, `get_slice`, ...)."""

    def __init__(self, inner: Any, config: str | None, closing: Any = None) -> None:
        self.inner, self.config, self._closing = inner, config, closing
        self.path: str = inner.path

    def metadata(self) -> dict[str, str]:
        """The inner checkpoint's metadata, and the config as text."""
        found = {k: str(v) for k, v in dict(self.inner.metadata()).items()}
        if self.config is not None:
            found[CONFIG_KEY] = self.config
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def close(self) -> None:
        """Close the inner reader, then the mapped ``.nemo`` file it reads through."""
        self.inner.close()
        if self._closing is not None:
            self._closing.close()

    def __contains__(self, name: object) -> bool:
        return name in self.inner

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[str]:
        return iter(self.inner)

    def __enter__(self) -> NemoReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NemoReader({self.path!r}, {self.inner!r})"
