"""Optional packages the tests drive or compare against, imported so that a missing one skips.

weightstore reads and writes every file format with NumPy alone; torch, safetensors, fsspec and
the Hugging Face packages are extras (``pip install -e '.[dev,torch,jax,remote]'``). A test that
needs one calls `need`, which skips it with a reason naming the package and the extra that
brings it, so a run without the extras reports what it left out instead of failing.
"""

from __future__ import annotations

from types import ModuleType

import pytest

EXTRA_OF = {
    "torch": "torch",
    "safetensors": "dev",
    "huggingface_hub": "dev",
    "transformers": "dev",
    "compressed_tensors": "dev",
    "moto": "dev",
    "boto3": "dev",
    "fsspec": "remote",
    "s3fs": "remote",
    "aiohttp": "remote",
    "jax": "jax",
    "flax": "jax",
    "xxhash": "integrity",
    "blake3": "integrity",
    "tensorstore": "orbax",
    "orbax": "jax",  # flax brings orbax-checkpoint, the producer of the Orbax tests
    "deepspeed": "dev",
}  # the top-level package -> the extra of pyproject.toml that installs it


def need(module: str) -> ModuleType:
    """`module`, imported; the calling test (or module, at import) skips when it is absent."""
    top = module.partition(".")[0]
    extra = EXTRA_OF.get(top, "dev")
    reason = f"needs {top}, an optional test dependency (pip install -e '.[{extra}]')"
    return pytest.importorskip(module, reason=reason)
