"""JAX on the CPU with four devices, set before any test touches a JAX backend.

JAX fixes its device count when its first backend starts, so the sharded tests' four CPU
devices are asked for here, at collection, before any test runs. Without jax installed this
does nothing, and every module here skips (`pytest.importorskip`).
"""

from __future__ import annotations

import contextlib
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no accelerator probing, whatever is installed

try:
    import jax
except ImportError:  # the jax extra is not installed: each test module skips
    pass
else:
    jax.config.update("jax_platforms", "cpu")
    # RuntimeError: a backend already started (jax used before collection got here).
    with contextlib.suppress(RuntimeError):
        jax.config.update("jax_num_cpu_devices", 4)
