"""The root of the family, `WeightstoreError`, and the one shape every message takes."""

from __future__ import annotations

from typing import Final

from weightstore.base._render import bounded_repr

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
