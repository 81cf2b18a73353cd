"""A rank-aware save (`weightstore.distributed.save`) into a set at a URL: every rank writes its
shards and rank 0 uploads the index last, all through the store's filesystem options (the
loopback S3 API here is reachable only with them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.distributed._threads import ThreadRanks
from weightstore import SafetensorsStore, load_from
from weightstore.distributed import save


def test_ranks_save_one_set_to_s3_with_the_store_s_options(
    s3_bucket: str, storage_options: dict[str, Any]
) -> None:
    rng = np.random.default_rng(0)
    model = {f"layers.{i}": {"weight": rng.standard_normal((8, 4)).astype(np.float32)}
             for i in range(4)}  # fmt: skip
    url = f"{s3_bucket}/tp-set/"
    store = SafetensorsStore.from_file(url, storage_options=storage_options)
    outcomes = ThreadRanks(2).run(lambda rank, group: save(store, model, group=group))
    assert all(ok for ok, _ in outcomes), outcomes
    assert outcomes[0][1].endswith("model.safetensors.index.json")
    back = {f"layers.{i}": {"weight": np.zeros((8, 4), np.float32)} for i in range(4)}
    result = load_from(back, SafetensorsStore.from_file(url, storage_options=storage_options))
    assert sorted(result.applied) == [f"layers.{i}.weight" for i in range(4)]
    for i in range(4):
        np.testing.assert_array_equal(back[f"layers.{i}"]["weight"], model[f"layers.{i}"]["weight"])
