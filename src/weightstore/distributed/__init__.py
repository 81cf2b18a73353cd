"""Sharded models across processes: tensor-parallel loads and rank-aware saves.

`load` reads into one rank's part of a model only that rank's slice of each split tensor,
by an explicit ``{regex: dim}`` plan or by the model's own ``DTensor`` placements, with torch's
``Shard(dim)`` rule (`chunk_bounds`). `save` writes a model whose parameters are DTensors into
one sharded set, each rank writing the tensors it owns and rank 0 committing the index.

Nothing here imports torch; `weightstore.distributed._torch` does, when a torch model or a
process group is involved.
"""

from weightstore.distributed._load import load
from weightstore.distributed._plan import FusedSplit, ShardPlan, chunk_bounds
from weightstore.distributed._save import save

__all__ = ["FusedSplit", "ShardPlan", "chunk_bounds", "load", "save"]
