"""Training checkpoints read without their frameworks: DeepSpeed ZeRO partitions and Orbax
checkpoints (docs/training-checkpoints.md). torch's own DCP directories are in
`weightstore.dcp`. Each layout is one module with a detector and an opener, which
`weightstore.locate` asks; nothing here imports torch, DeepSpeed or JAX.
"""
