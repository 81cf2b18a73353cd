"""The reader protocol's container half, written once for readers that are no `ContainerReader`
(a training checkpoint's, over many files): membership, length and iteration over the tensor
names, and use as a context manager that closes the reader."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from types import TracebackType
from typing import TypeVar

__all__ = ["ReaderShell"]

ShellT = TypeVar("ShellT", bound="ReaderShell")


class ReaderShell:
    """Mixed into a reader that defines `_tensor_names` (its names, for O(1) membership),
    `names` (their listed order) and `close`."""

    def _tensor_names(self) -> Collection[str]:
        raise NotImplementedError

    def names(self) -> list[str]:
        """Every tensor's name, in the order the reader lists them."""
        raise NotImplementedError

    def close(self) -> None:
        """Let the files go; arrays already handed out stay valid."""
        raise NotImplementedError

    def __contains__(self, name: object) -> bool:
        return name in self._tensor_names()

    def __len__(self) -> int:
        return len(self._tensor_names())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __enter__(self: ShellT) -> ShellT:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
