"""A meta-device model loads straight from the mapped file: no second copy of the weights."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from weightstore import burnpack
from weightstore.dtypes import from_name
from weightstore.entry import TensorEntry

pytestmark = pytest.mark.slow  # writes and maps a 1 GiB file: about 4 s and 1 GiB of disk

pytest.importorskip("torch")

LAYERS, WIDTH = 16, 4096  # 16 x 4096 x 4096 f32 = 1 GiB
GIB = 2**30

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    from torch import nn
    from weightstore import BurnpackStore, load_from

    class Big(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(
                nn.Linear({width}, {width}, bias=False) for _ in range({layers})
            )

    with torch.device("meta"):
        model = Big()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = load_from(model, BurnpackStore.from_file(sys.argv[1]))
    total = sum(float(p.sum()) for p in model.parameters())  # touch every byte
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({{"applied": len(result.applied), "total": total,
                      "growth": after - before}}))
    """
)


def _layer(index: int) -> np.ndarray:
    return np.full((WIDTH, WIDTH), 1.0 / (index + 1), np.float32)


def test_meta_model_load_peak_memory_stays_near_model_size(tmp_path: Path) -> None:
    path = tmp_path / "big.bpk"
    f32 = from_name("F32")
    entries = [
        TensorEntry(f"layers.{i}.weight", f32, (WIDTH, WIDTH), lambda i=i: _layer(i))
        for i in range(LAYERS)
    ]
    burnpack.write_file(path, entries)
    assert path.stat().st_size >= GIB
    script = CHILD.format(width=WIDTH, layers=LAYERS)
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout)
    assert report["applied"] == LAYERS
    expected = sum(WIDTH * WIDTH / (i + 1) for i in range(LAYERS))
    assert report["total"] == pytest.approx(expected, rel=1e-6)
    # One copy of the weights is 1 GiB; a second allocation would double it.
    assert report["growth"] < 1.2 * GIB, f"peak RSS grew by {report['growth'] / GIB:.2f} GiB"
