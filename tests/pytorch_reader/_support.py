"""Builders for the PyTorch reader tests: hand-assembled pickles, zip/legacy/tar archives, and
comparisons against `torch.load`.

The pickle assembler writes opcodes directly, so hostile and deliberately broken files need
neither torch nor a Python object that would pickle that way; each helper returns the bytes of
one pushed value.
"""

from __future__ import annotations

import io
import struct
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

# -- a pickle assembler -------------------------------------------------------------------------


def op_global(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def op_str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def op_int(value: int) -> bytes:
    if -(2**31) <= value < 2**31:
        return b"J" + struct.pack("<i", value)
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def op_tuple(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"


def op_list(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"l"


def op_dict(pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    return b"}(" + b"".join(k + v for k, v in pairs) + b"u"


def op_call(callee: bytes, *args: bytes) -> bytes:
    return callee + op_tuple(*args) + b"R"


def op_storage(key: str, numel: int, cls: str = "FloatStorage") -> bytes:
    """A zip-style storage persistent id, resolved through BINPERSID."""
    pid = op_tuple(
        op_str("storage"), op_global("torch", cls), op_str(key), op_str("cpu"), op_int(numel)
    )
    return pid + b"Q"


def op_tensor(storage: bytes, offset: int, size: Iterable[int], stride: Iterable[int]) -> bytes:
    """``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())``."""
    return op_call(
        op_global("torch._utils", "_rebuild_tensor_v2"),
        storage,
        op_int(offset),
        op_tuple(*map(op_int, size)),
        op_tuple(*map(op_int, stride)),
        b"\x89",
        op_call(op_global("collections", "OrderedDict")),
    )


def pickle_of(body: bytes, protocol: int = 2) -> bytes:
    return b"\x80" + bytes([protocol]) + body + b"."


# -- archives -----------------------------------------------------------------------------------


def write_zip(
    path: Path,
    pickle: bytes,
    storages: dict[str, bytes],
    *,
    prefix: str = "archive",
    byteorder: str | None = "little",
    extra: dict[str, bytes] | None = None,
) -> Path:
    """A zip checkpoint laid out as torch lays one out (stored entries)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{prefix}/data.pkl", pickle)
        if byteorder is not None:
            archive.writestr(f"{prefix}/byteorder", byteorder)
        for key, data in storages.items():
            archive.writestr(f"{prefix}/data/{key}", data)
        for name, data in (extra or {}).items():
            archive.writestr(f"{prefix}/{name}", data)
    return path


def rewrite_zip(
    source: Path,
    target: Path,
    *,
    transform: Callable[[str, bytes], bytes | None] = lambda name, data: data,
    compression: int = zipfile.ZIP_STORED,
    force_zip64: bool = False,
) -> Path:
    """Copy a zip entry by entry; `transform` may change an entry or drop it (``None``)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", compression) as new:
        for info in old.infolist():
            data = transform(info.filename, old.read(info))
            if data is None:
                continue
            entry = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            entry.compress_type = compression
            with new.open(entry, "w", force_zip64=force_zip64) as out:
                out.write(data)
    return target


def write_tar(path: Path, entries: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


SYS_INFO = pickle_of(
    op_dict(
        [
            (op_str("protocol_version"), op_int(1001)),
            (op_str("little_endian"), b"\x88"),
            (
                op_str("type_sizes"),
                op_dict(
                    [
                        (op_str("short"), op_int(2)),
                        (op_str("int"), op_int(4)),
                        (op_str("long"), op_int(4)),
                    ]
                ),
            ),
        ]
    )
)


def torch_style_tar(
    path: Path,
    storages: list[tuple[int, str, np.ndarray[Any, Any]]],
    tensors: list[tuple[int, int, str, tuple[int, ...], tuple[int, ...], int]],
    root: bytes,
    views: bytes = op_list(),
) -> Path:
    """A tar checkpoint as torch < 0.1.10 wrote one: storages ``(key, class, values)``, tensors
    ``(key, storage_key, type, size, stride, offset)``, and a root pickle body whose tensors
    are string persistent ids (``op_str("7") + b"Q"``)."""
    blob = pickle_of(op_int(len(storages)))
    for key, cls, values in storages:
        blob += pickle_of(op_tuple(op_int(key), op_str("cpu"), op_global("torch", cls)))
        blob += (
            struct.pack("<q", values.size) + values.astype(values.dtype.newbyteorder("<")).tobytes()
        )
    blob += pickle_of(views)
    table = pickle_of(op_int(len(tensors)))
    for key, storage_key, type_name, size, stride, offset in tensors:
        table += pickle_of(op_tuple(op_int(key), op_int(storage_key), op_str(type_name)))
        table += struct.pack(f"<i4x{2 * len(size) + 1}q", len(size), *size, *stride, offset)
    return write_tar(
        path, {"sys_info": SYS_INFO, "storages": blob, "tensors": table, "pickle": pickle_of(root)}
    )


# -- reading everything -------------------------------------------------------------------------


def exercise(path: Path, **limits: int) -> None:
    """Every read the API offers, on every tensor; lets the first error propagate."""
    from weightstore.pytorch_reader import PytorchReader

    with PytorchReader(path, **limits) as reader:
        for name in reader:
            reader.get(name)
            reader.get_slice(name)[...]
        reader.load_object()
        reader.metadata()
        reader.others()


# -- comparing with torch -----------------------------------------------------------------------


def torch_bytes(tensor: Any) -> bytes:
    """The element bytes torch holds for `tensor`, C-ordered, lazy conj/neg bits resolved."""
    plain = tensor.detach().resolve_conj().resolve_neg().contiguous().clone()
    return bytes(plain.untyped_storage())


def assert_same(array: np.ndarray[Any, Any], tensor: Any, name: str = "") -> None:
    """Bit-for-bit: shape, dtype (by name), and every byte."""
    from weightstore.dtypes import from_torch

    assert tuple(array.shape) == tuple(tensor.shape), name
    assert array.dtype == from_torch(str(tensor.dtype)).numpy, name
    assert np.ascontiguousarray(array).tobytes() == torch_bytes(tensor), name


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Tensors by dotted name, recursing as the reader does (modules via their state_dict)."""
    import torch

    if isinstance(value, torch.Tensor):
        return {prefix: value}
    if isinstance(value, torch.nn.Module):
        return {f"{prefix}.{k}" if prefix else k: v for k, v in value.state_dict().items()}
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    found: dict[str, Any] = {}
    for key, item in items:
        found.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return found
