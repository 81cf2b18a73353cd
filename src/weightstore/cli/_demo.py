"""The bundled example: a tiny CNN's weights as a burnpack file, and the `demo` command.

`example_entries` builds the example deterministically; the shipped file is exactly what it
writes (a test holds that), so the example can always be regenerated and never drifts.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from importlib import resources
from typing import Any

import ml_dtypes
import numpy as np

from weightstore.burnpack import BurnpackReader, BurnpackWriter, Scalar
from weightstore.entry import TensorEntry

__all__ = ["EXAMPLE_METADATA", "EXAMPLE_NAME", "example_entries", "example_path", "run_demo"]

EXAMPLE_NAME = "tiny_cnn.bpk"  # the bundled example, in weightstore/examples/
# The metadata the example was written with; the demo checks the rewrite keeps it.
EXAMPLE_METADATA = {"format": "burnpack", "producer": "weightstore", "model": "tiny_cnn"}
EXAMPLE_SCALARS = {"epoch": Scalar("UInt", 3), "learning_rate": Scalar("Float", 0.001)}


def example_entries() -> list[TensorEntry]:
    """The tiny CNN: conv + batch norm + linear, one bf16 embedding, ids fixed for stability."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray[Any, Any]:
        return rng.standard_normal(shape).astype("<f4")

    arrays = {
        "conv.weight": normal(8, 1, 3, 3),
        "conv.bias": normal(8),
        "norm.gamma": np.ones(8, "<f4"),
        "norm.beta": np.zeros(8, "<f4"),
        "norm.running_mean": normal(8),
        "norm.running_var": np.abs(normal(8)),
        "fc.weight": normal(128, 10),
        "fc.bias": normal(10),
        "embedding.weight": normal(16, 4).astype(ml_dtypes.bfloat16),
    }
    return [
        TensorEntry.from_array(name, array, param_id=1000 + index)
        for index, (name, array) in enumerate(arrays.items())
    ]


def example_bytes() -> bytes:
    return BurnpackWriter(example_entries(), EXAMPLE_METADATA, EXAMPLE_SCALARS).to_bytes()


def example_path() -> str:
    """Path of the example file shipped inside the package."""
    return str(resources.files("weightstore") / "examples" / EXAMPLE_NAME)


def run_demo(workdir: str | None = None) -> list[str]:
    """Read the bundled example, rewrite it from its decoded contents, and check the bytes match.

    Returns:
        Lines describing what was done, for the CLI to print.
    """
    source = example_path()
    with BurnpackReader.from_file(source) as pack:
        ordered = sorted(pack.descriptors.values(), key=lambda d: d.data_offsets)
        entries = [
            TensorEntry(d.name, d.dtype, d.shape, pack.get_bytes(d.name), d.param_id)
            for d in ordered
        ]
        writer = BurnpackWriter(entries, pack.metadata(), pack.scalars)
        with tempfile.TemporaryDirectory(dir=workdir) as scratch:
            rewritten = writer.save(os.path.join(scratch, "rewritten"))
            with open(source, "rb") as a, open(rewritten, "rb") as b:
                original_hash = hashlib.sha256(a.read()).hexdigest()
                rewritten_hash = hashlib.sha256(b.read()).hexdigest()
    verdict = "identical" if original_hash == rewritten_hash else "DIFFERENT"
    return [
        f"rewrote {len(entries)} tensors from their decoded contents: bytes {verdict}",
        f"sha256 {original_hash}",
    ]
