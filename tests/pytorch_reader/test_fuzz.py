"""Random byte mutations of valid files, in every layout: reading them raises only weightstore
errors, and finishes (a hypothesis deadline, far above the milliseconds each file takes, turns a
hang into a failure). The default run tries a few dozen files; ``pytest -m slow`` thousands."""

from __future__ import annotations

import contextlib
import itertools
import struct
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pytorch_reader._support import (
    exercise,
    op_dict,
    op_global,
    op_int,
    op_list,
    op_storage,
    op_str,
    op_tensor,
    op_tuple,
    pickle_of,
    torch_style_tar,
    write_zip,
)
from weightstore.errors import WeightstoreError
from weightstore.pytorch_reader._layout import MAGIC_NUMBER, PROTOCOL_VERSION

VALUES = np.arange(12, dtype="<f4")
CONFIG = op_dict([(op_str("lr"), op_int(3)), (op_str("names"), op_list(op_str("a")))])


def _zip(path: Path) -> bytes:
    root = op_dict(
        [
            (op_str("w"), op_tensor(op_storage("0", 12), 0, (3, 4), (4, 1))),
            (op_str("t"), op_tensor(op_storage("0", 12), 1, (2, 3), (1, 4))),
            (op_str("config"), CONFIG),
        ]
    )
    return write_zip(path, pickle_of(root, 4), {"0": VALUES.tobytes()}).read_bytes()


def _legacy(path: Path) -> bytes:
    storage = (
        op_tuple(
            op_str("storage"),
            op_global("torch", "FloatStorage"),
            op_str("k"),
            op_str("cpu"),
            op_int(12),
            b"N",
        )
        + b"Q"
    )
    root = op_dict([(op_str("w"), op_tensor(storage, 2, (5,), (2,))), (op_str("c"), CONFIG)])
    return (
        pickle_of(op_int(MAGIC_NUMBER))
        + pickle_of(op_int(PROTOCOL_VERSION))
        + pickle_of(op_dict([(op_str("little_endian"), b"\x88")]))
        + pickle_of(root)
        + pickle_of(op_list(op_str("k")))
        + struct.pack("<q", 12)
        + VALUES.tobytes()
    )


def _tar(path: Path) -> bytes:
    return torch_style_tar(
        path,
        storages=[(1, "FloatStorage", VALUES)],
        tensors=[(2, 1, "torch.FloatTensor", (3, 4), (4, 1), 0)],
        root=op_dict([(op_str("x"), op_str("2") + b"Q"), (op_str("c"), CONFIG)]),
    ).read_bytes()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    folder = tmp_path_factory.mktemp("fuzz")
    seeds = {
        "zip": _zip(folder / "seed.zip"),
        "legacy": _legacy(folder / "seed.legacy"),
        "tar": _tar(folder / "seed.tar"),
        "pickle": pickle_of(CONFIG, 2),
    }
    for name, data in seeds.items():  # every seed reads cleanly before it is mutated
        (folder / name).write_bytes(data)
        exercise(folder / name)
    return folder, seeds


_COUNTER = itertools.count()
MUTATIONS = st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=6)


def _check(
    workspace: tuple[Path, dict[str, bytes]],
    seed: str,
    mutations: list[tuple[int, int]],
    cut: int | None,
) -> None:
    folder, seeds = workspace
    data = bytearray(seeds[seed])
    for position, byte in mutations:
        data[position % len(data)] = byte
    if cut is not None:
        del data[cut % len(data) :]
    path = folder / f"mutant-{next(_COUNTER)}"  # a fresh name: old arrays may map the last one
    path.write_bytes(bytes(data))
    with contextlib.suppress(WeightstoreError):
        exercise(path)


SEEDS = st.sampled_from(["zip", "legacy", "tar", "pickle"])
CUTS = st.none() | st.integers(0, 2**20)


@settings(
    max_examples=80,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(seed=SEEDS, mutations=MUTATIONS, cut=CUTS)
def test_mutated_files_raise_only_our_errors(
    workspace: tuple[Path, dict[str, bytes]],
    seed: str,
    mutations: list[tuple[int, int]],
    cut: int | None,
) -> None:
    _check(workspace, seed, mutations, cut)


@pytest.mark.slow
@settings(
    max_examples=4000,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(seed=SEEDS, mutations=MUTATIONS, cut=CUTS)
def test_many_mutated_files_raise_only_our_errors(
    workspace: tuple[Path, dict[str, bytes]],
    seed: str,
    mutations: list[tuple[int, int]],
    cut: int | None,
) -> None:
    _check(workspace, seed, mutations, cut)
