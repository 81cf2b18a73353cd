"""What opening a checkpoint yields: the layout's facts (`ArchiveInfo`) and the decoded root
object with what to close when done (`Loaded`). The file itself is a `weightstore.io._source`
`MmapSource`, mapped once by `_archive.open_archive`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from weightstore.base._record import ValueRecord

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ArchiveInfo", "Layout", "Loaded"]

Layout = Literal["zip", "legacy", "tar", "pickle", "torchscript"]
"""The layouts a checkpoint comes in (see `_layout`); ``"pickle"`` is a plain pickle file and
``"torchscript"`` a `torch.jit.save` archive (the zip layout, see `_torchscript`)."""


class ArchiveInfo(ValueRecord):
    """What the layout records about the file (see `PytorchMetadata` for the fields)."""

    layout: Layout
    byte_order: str
    pickle_protocol: int
    format_version: str | None
    archive_version: str | None
    storage_alignment: int | None
    serialization_id: str | None
    sys_info: dict[str, object] | None

    def __init__(
        self,
        layout: Layout,
        byte_order: str = "little",
        pickle_protocol: int = 0,
        format_version: str | None = None,
        archive_version: str | None = None,
        storage_alignment: int | None = None,
        serialization_id: str | None = None,
        sys_info: dict[str, object] | None = None,
    ) -> None:
        super().__init__(
            layout, byte_order, pickle_protocol, format_version, archive_version,
            storage_alignment, serialization_id, sys_info,
        )  # fmt: skip


class Loaded:
    """An opened checkpoint: its decoded root object and what to close when done."""

    __slots__ = ("closers", "info", "root")

    def __init__(
        self,
        root: object,
        info: ArchiveInfo,
        closers: list[Callable[[], None]] | None = None,
    ) -> None:
        self.root = root
        self.info = info
        self.closers: list[Callable[[], None]] = [] if closers is None else closers

    def close(self) -> None:
        """Run the closers, last added first; a second call does nothing."""
        while self.closers:
            self.closers.pop()()
