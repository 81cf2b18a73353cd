"""One process of the two-process load in test_two_process.py, run as a script.

    python _two_process.py <coordinator port> <process id> <file>

Joins a two-process JAX run on 127.0.0.1 (gloo collectives on the CPU), loads the file's
``w`` split by rows over the two processes' devices and ``b`` replicated, and prints one JSON
line: the reads this process made (tensor, bytes) and the rows its device holds.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import jax

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")


def main(port: str, process_id: int, path: str) -> None:
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from weightstore import BurnpackStore
    from weightstore.bridge import load_tree
    from weightstore.io._source import MmapSource

    reads: list[tuple[str, int]] = []
    read, array = MmapSource.read, MmapSource.array

    def recording_read(self: Any, offset: int, size: int, what: str, tensor: Any = None) -> Any:
        reads.append((tensor, size))
        return read(self, offset, size, what, tensor)

    def recording_array(self: Any, offset: int, size: int, *rest: Any) -> Any:
        reads.append((rest[-1], size))
        return array(self, offset, size, *rest)

    MmapSource.read, MmapSource.array = recording_read, recording_array  # type: ignore[method-assign]
    mesh = Mesh(np.array(jax.devices()), ("x",))  # one CPU device per process
    abstract = {
        "w": jax.ShapeDtypeStruct((64, 32), jnp.float32),
        "b": jax.ShapeDtypeStruct((32,), jnp.float32),
    }
    shardings = {"w": NamedSharding(mesh, P("x", None)), "b": NamedSharding(mesh, P())}
    tree, result = load_tree(abstract, BurnpackStore.from_file(path), device=shardings)
    (shard,) = tree["w"].addressable_shards
    rows = shard.index[0]
    expected = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)[rows]
    print(
        json.dumps(
            {
                "process": jax.process_index(),
                "success": result.is_success(),
                "reads": [(tensor, size) for tensor, size in reads if tensor in ("w", "b")],
                "rows": [rows.start, rows.stop],
                "equal": bool(np.array_equal(np.asarray(shard.data), expected)),
                "global": len(jax.devices()),
            }
        ),
        flush=True,
    )
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
