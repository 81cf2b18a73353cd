"""Resharding on read from Orbax: a checkpoint that JAX saved from 4 devices (one matrix sharded
by rows, one by columns, in small chunks as ``SaveArgs(chunk_byte_size=...)`` asks), loaded by
`weightstore.distributed.load` at 1, 2 and 3 ranks. Each rank's values are its slice of what
was saved, and the bytes tensorstore reads for it (its ``bytes_read`` metric) stay within
1.1x of its share of what reading every array whole costs: only the chunks that overlap its
slice are read, and with 3-row chunks a slice of 64 rows overlaps at most 66 of them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ts = pytest.importorskip("tensorstore", reason="needs tensorstore, which reads Orbax's arrays")
pytest.importorskip("orbax.checkpoint", reason="needs orbax-checkpoint to save checkpoints")
pytest.importorskip("jax", reason="needs jax (pip install -e '.[jax]')")

SHAPE = (192, 320)
_SAVE = textwrap.dedent(
    """
    import os, sys
    import jax, numpy as np
    import orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("x",))  # 4 CPU devices (XLA_FLAGS)
    rng = np.random.default_rng(0)
    tree = {
        "rows": jax.device_put(rng.standard_normal(SHAPE, dtype=np.float32),
                               NamedSharding(mesh, P("x", None))),
        "cols": jax.device_put(rng.standard_normal(SHAPE, dtype=np.float32),
                               NamedSharding(mesh, P(None, "x"))),
    }
    np.savez(sys.argv[1] + ".npz", **{k: np.asarray(v) for k, v in tree.items()})
    # 3,840-byte chunks: each device's shard in 16, so 3 rows or 5 columns a chunk
    save_args = jax.tree_util.tree_map(lambda _: ocp.SaveArgs(chunk_byte_size=3840), tree)
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=sys.argv[2] == "ocdbt")
    ocp.Checkpointer(handler).save(sys.argv[1], args=ocp.args.PyTreeSave(tree, save_args))
    """
).replace("SHAPE", repr(SHAPE))


@pytest.fixture(scope="module", params=["ocdbt", "zarr"])
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = (tmp_path_factory.mktemp("orbax-4-devices") / request.param).absolute()
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env.pop("JAX_PLATFORMS", None)
    subprocess.run(
        [sys.executable, "-c", _SAVE, str(path), request.param], check=True, env=env, timeout=300
    )
    return path


def _bytes_read() -> int:
    metrics = ts.experimental_collect_matching_metrics("/tensorstore/kvstore/file/bytes_read")
    return sum(int(value.get("value", 0)) for metric in metrics for value in metric["values"])


def test_each_rank_reads_only_the_chunks_of_its_slice(saved: Path) -> None:
    from weightstore import Store, open_reader
    from weightstore.distributed import chunk_bounds, load
    from weightstore.training._orbax import OrbaxReader

    full = dict(np.load(f"{saved}.npz"))
    whole: dict[str, int] = {}
    for name in ("rows", "cols"):  # what reading each array whole costs, from a fresh reader
        before = _bytes_read()
        with open_reader(saved) as reader:
            assert isinstance(reader, OrbaxReader)
            assert np.array_equal(reader.get(name), full[name])
        whole[name] = _bytes_read() - before
    rows, cols = SHAPE
    for world_size in (1, 2, 3):
        for rank in range(world_size):
            mine = [chunk_bounds(size, rank, world_size) for size in (rows, cols)]
            model: dict[str, Any] = {
                "rows": np.zeros((mine[0][1] - mine[0][0], cols), np.float32),
                "cols": np.zeros((rows, mine[1][1] - mine[1][0]), np.float32),
            }
            before = _bytes_read()
            plan = {"^rows$": 0, "^cols$": 1}
            result = load(Store.from_file(saved), model, plan, rank=rank, world_size=world_size)
            read = _bytes_read() - before
            assert result.is_success(), result
            assert np.array_equal(model["rows"], full["rows"][slice(*mine[0])])
            assert np.array_equal(model["cols"], full["cols"][:, slice(*mine[1])])
            share = (
                whole["rows"] * (mine[0][1] - mine[0][0]) / rows
                + whole["cols"] * (mine[1][1] - mine[1][0]) / cols
            )
            assert 0.9 * share <= read <= 1.1 * share, (world_size, rank, read, share)
            print(f"{saved.name}: rank {rank} of {world_size} (saved by 4 devices): read "
                  f"{read:,} bytes for a share of {share:,.0f} ({read / share:.4f}x)")  # fmt: skip
