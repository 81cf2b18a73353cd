"""A burnpack file carrying digests (docs/integrity.md) keeps the layout Burn reads: the
digests are one more text -> text pair of the CBOR ``metadata`` map, which Burn's reader
decodes as `BTreeMap<String, String>` and otherwise ignores."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import cbor2
import numpy as np

from weightstore import BurnpackStore
from weightstore.io._digest import METADATA_KEY, digest_of


def test_the_digests_are_a_string_pair_of_the_cbor_metadata_map(tmp_path: Path) -> None:
    path = tmp_path / "m.bpk"
    arrays = {"w": np.arange(6, dtype=np.float32), "b": np.ones(2, np.int32)}
    BurnpackStore.from_file(path).with_digests("sha256").collect_from(arrays)
    data = path.read_bytes()
    magic, _version, size = struct.unpack_from("<4sHI", data)
    assert magic == b"NRUB"
    top = cbor2.loads(data[10 : 10 + size])
    assert list(top) == ["tensors", "metadata"]  # Burn's field order; scalars omitted empty
    pairs = top["metadata"]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in pairs.items())
    digests = json.loads(pairs[METADATA_KEY])
    assert digests == {
        "algorithm": "sha256",
        "tensors": {name: digest_of("sha256", a.tobytes()) for name, a in arrays.items()},
    }
