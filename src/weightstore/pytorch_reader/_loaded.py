"""What opening a checkpoint yields: the layout's facts (`ArchiveInfo`) and the decoded root
object with what to close when done (`Loaded`). The file itself is a `weightstore._bytesource`
`MmapSource`, mapped once by `_archive.open_archive`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ArchiveInfo", "Layout", "Loaded"]

Layout = Literal["zip", "legacy", "tar", "pickle", "torchscript"]
"""The layouts a checkpoint comes in (see `_layout`); ``"pickle"`` is a plain pickle file and
``"torchscript"`` a `torch.jit.save` archive (the zip layout, see `_torchscript`)."""


@dataclass(frozen=True, slots=True)
class ArchiveInfo:
    """What the layout records about the file (see `PytorchMetadata` for the fields)."""

    layout: Layout
    byte_order: str = "little"
    pickle_protocol: int = 0
    format_version: str | None = None
    archive_version: str | None = None
    storage_alignment: int | None = None
    serialization_id: str | None = None
    sys_info: dict[str, object] | None = None


@dataclass(slots=True)
class Loaded:
    """An opened checkpoint: its decoded root object and what to close when done."""

    root: object
    info: ArchiveInfo
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Run the closers, last added first; a second call does nothing."""
        while self.closers:
            self.closers.pop()()
