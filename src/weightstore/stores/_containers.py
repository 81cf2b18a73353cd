"""The three stores: burnpack and SafeTensors (load and save), PyTorch (load only).

Each store knows which container reader and writer it uses and its defaults (reference section
3.5), and nothing of torch. Departures from Burn, all deliberate: an empty filter means "no
filter" everywhere, invalid regexes raise at once, remapping applies to burnpack saves too, and
the PyTorch store's from-adapter is the identity, since our models are PyTorch already.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Sequence
from typing import Any

from weightstore import burnpack, safetensors
from weightstore.burnpack import BurnpackReader
from weightstore.dtypes import from_name
from weightstore.entry import TensorEntry
from weightstore.errors import InvalidOptionError
from weightstore.safetensors import SafetensorsReader
from weightstore.snapshot import TensorSnapshot
from weightstore.stores._base import Store, StoreOptions, _Output, default_metadata

__all__ = ["BurnpackStore", "PytorchStore", "SafetensorsStore"]

Source = bytes | bytearray | memoryview


def _snapshot(name: str, reader: Any, dtype: Any, shape: tuple[int, ...], param_id: int | None
              ) -> TensorSnapshot:  # fmt: skip
    return TensorSnapshot(
        tuple(name.split(".")), dtype, shape, functools.partial(reader.get, name), (), param_id
    )


class BurnpackStore(Store):
    """Burn's `.bpk` files, in a file or in memory.

    Example:
        >>> BurnpackStore.from_file("model.bpk").allow_partial().apply_to(model)  # doctest: +SKIP
    """

    format_name = "burnpack"

    @classmethod
    def _defaults(cls) -> StoreOptions:
        return StoreOptions(metadata=default_metadata(cls.format_name))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BurnpackStore:
        return cls(path=os.fspath(path), options=cls._defaults())

    @classmethod
    def from_bytes(cls, data: Source | None = None) -> BurnpackStore:
        """A store over bytes to load, or (with None) an empty one to save into."""
        output = _Output(None if data is None else bytes(data))
        return cls(output=output, options=cls._defaults())

    @classmethod
    def from_static(cls, buffer: Source) -> BurnpackStore:
        """A store viewing the caller's buffer in place: tensors are views, nothing is copied."""
        return cls(static=buffer, options=cls._defaults())

    def _open(self) -> BurnpackReader:
        if self._path is not None:
            return BurnpackReader.from_file(self._target_path(burnpack.EXTENSION))
        if self._static is not None:
            return BurnpackReader.from_static(self._static)
        if self._output is None or self._output.data is None:
            raise InvalidOptionError("this store has no bytes to read from")
        return BurnpackReader.from_bytes(self._output.data)

    def _read_snapshots(self) -> list[TensorSnapshot]:
        reader = self._open()
        ordered = sorted(reader.descriptors.values(), key=lambda d: d.data_offsets)
        return [_snapshot(d.name, reader, d.dtype, d.shape, d.param_id) for d in ordered]

    def _write_snapshots(self, snapshots: Sequence[TensorSnapshot]) -> None:
        # Burn writes a param_id for every tensor; sources without one get a fresh random id.
        entries = [
            TensorEntry(
                s.full_path,
                s.dtype,
                s.shape,
                s.to_numpy,
                s.param_id if s.param_id is not None else secrets.randbits(64),
            )
            for s in snapshots
        ]
        writer = burnpack.BurnpackWriter(entries, self._options.metadata)
        if self._path is not None:
            writer.save(
                self._path,
                overwrite=self._options.overwrite,
                auto_extension=self._options.auto_extension,
            )
        elif self._output is not None:
            self._output.data = writer.to_bytes()
        else:
            raise InvalidOptionError("a static buffer store is read-only")

    def read_metadata(self) -> dict[str, str]:
        return dict(self._open().metadata)


class SafetensorsStore(Store):
    """SafeTensors files, in a file or in memory, interchangeable with the safetensors package."""

    format_name = "safetensors"

    @classmethod
    def _defaults(cls) -> StoreOptions:
        return StoreOptions(metadata=default_metadata(cls.format_name), auto_extension=False)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SafetensorsStore:
        return cls(path=os.fspath(path), options=cls._defaults())

    @classmethod
    def from_bytes(cls, data: Source | None = None) -> SafetensorsStore:
        output = _Output(None if data is None else bytes(data))
        return cls(output=output, options=cls._defaults())

    def _open(self) -> SafetensorsReader:
        if self._path is not None:
            return SafetensorsReader.from_file(self._path)
        if self._output is None or self._output.data is None:
            raise InvalidOptionError("this store has no bytes to read from")
        return SafetensorsReader.from_bytes(self._output.data)

    def _read_snapshots(self) -> list[TensorSnapshot]:
        reader = self._open()
        return [
            _snapshot(
                name, reader, reader.descriptor(name).dtype, reader.descriptor(name).shape, None
            )
            for name in reader.names()
        ]

    def _write_snapshots(self, snapshots: Sequence[TensorSnapshot]) -> None:
        flex32 = from_name("FLEX32")
        entries = [
            TensorEntry(
                s.full_path,
                from_name("F32") if s.dtype == flex32 else s.dtype,
                s.shape,
                s.to_numpy,
            )
            for s in snapshots
        ]
        metadata = dict(self._options.metadata)
        if self._path is not None:
            safetensors.write_file(self._path, entries, metadata, overwrite=self._options.overwrite)
        elif self._output is not None:
            self._output.data = safetensors.write_bytes(entries, metadata)

    def read_metadata(self) -> dict[str, str]:
        return dict(self._open().metadata)


class PytorchStore(Store):
    """PyTorch `.pt`/`.pth` checkpoints, read without torch; load only.

    Defaults as Burn's: contiguous index mapping and enum-variant skipping are on.
    """

    format_name = "pytorch"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PytorchStore:
        options = StoreOptions(map_indices_contiguous=True, skip_enum_variants=True)
        return cls(path=os.fspath(path), options=options)

    def _reader(self) -> Any:
        from weightstore.pytorch_reader import PytorchReader  # the reader stands alone

        assert self._path is not None
        return PytorchReader(self._path, top_level_key=self._options.top_level_key)

    def _read_snapshots(self) -> list[TensorSnapshot]:
        reader = self._reader()
        snapshots = []
        for name in reader:
            tensor = reader.get(name)
            snapshots.append(
                TensorSnapshot(
                    tuple(name.split(".")), tensor.dtype, tuple(tensor.shape), tensor.to_numpy
                )
            )
        return snapshots

    def _write_snapshots(self, snapshots: Sequence[TensorSnapshot]) -> None:
        raise InvalidOptionError(
            "saving to PyTorch format is not supported; save with BurnpackStore or SafetensorsStore"
        )

    def read_metadata(self) -> dict[str, str]:
        reader = self._reader()
        return {key: str(value) for key, value in reader.metadata().items()}
