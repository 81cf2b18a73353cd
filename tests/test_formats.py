"""The format registry: one record per format, detection from bytes, the extension rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from weightstore import burnpack, formats, pytorch_reader, safetensors
from weightstore._format import PROBE_SIZE, path_for_read, path_for_write
from weightstore.entry import TensorEntry
from weightstore.errors import UnsupportedFormatError

ENTRIES = [TensorEntry.from_array("w", np.arange(6, dtype=np.float32).reshape(2, 3))]


def _files(tmp_path: Path) -> dict[str, Path]:
    bpk, st = tmp_path / "m.bpk", tmp_path / "m.safetensors"
    burnpack.write_file(bpk, ENTRIES)
    safetensors.write_file(st, ENTRIES)
    return {"burnpack": bpk, "safetensors": st}


def test_every_format_is_registered_once_in_sniff_order() -> None:
    assert [fmt.name for fmt in formats.FORMATS] == ["burnpack", "safetensors", "pytorch"]
    assert formats.FORMATS == (burnpack.FORMAT, safetensors.FORMAT, pytorch_reader.FORMAT)
    assert [fmt.writable for fmt in formats.FORMATS] == [True, True, False]


def test_detection_reads_bytes_not_names(tmp_path: Path) -> None:
    for name, path in _files(tmp_path).items():
        disguised = path.rename(tmp_path / f"{name}.bin")  # the extension lies
        assert formats.detect_format(disguised).name == name


@pytest.mark.parametrize(
    ("head", "name"),
    [(b"PK\x03\x04" + bytes(60), "pytorch"), (b"\x80\x02}q\x00.", "pytorch"),
     (b"L119547037146038801333356\n.", "pytorch"), (bytes(257) + b"ustar" + bytes(250), "pytorch"),
     (b"NRUB\x01\x00\x00\x00\x00\x00", "burnpack"),
     (b"\x02\x00\x00\x00\x00\x00\x00\x00{}", "safetensors")],
)  # fmt: skip
def test_each_signature_is_recognised(head: bytes, name: str) -> None:
    assert formats.detect_format_of_bytes(head[:PROBE_SIZE], len(head)).name == name


def test_a_safetensors_header_length_that_starts_like_a_pickle_is_still_safetensors() -> None:
    header = b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    header += b" " * (0x80 - len(header))  # N = 128: the file starts with byte 0x80, as pickles do
    data = len(header).to_bytes(8, "little") + header + b"\x07"
    assert data[:1] == b"\x80"
    assert formats.detect_format_of_bytes(data[:PROBE_SIZE], len(data)).name == "safetensors"
    assert safetensors.SafetensorsReader.from_bytes(data).get("w").tolist() == [7]


def test_unknown_bytes_and_a_json_index_are_refused_with_what_they_are() -> None:
    with pytest.raises(UnsupportedFormatError) as caught:
        formats.detect_format_of_bytes(b"\x00\x01\x02\x03garbage", 11, "x.bin")
    assert caught.value.path == "x.bin" and "00 01 02 03" in caught.value.detail
    index = json.dumps({"metadata": {}, "weight_map": {"w": "model-00001-of-00002.safetensors"}})
    with pytest.raises(UnsupportedFormatError, match="sharded checkpoint's index"):
        formats.detect_format_of_bytes(index.encode(), len(index))


def test_a_header_length_past_the_end_is_not_safetensors() -> None:
    head = (10**6).to_bytes(8, "little") + b"{}"
    with pytest.raises(UnsupportedFormatError):
        formats.detect_format_of_bytes(head, len(head))


def test_format_for_name_and_format_named() -> None:
    assert formats.format_for_name("a/b.SAFETENSORS") is safetensors.FORMAT
    assert formats.format_for_name("ckpt.pth") is pytorch_reader.FORMAT
    assert formats.format_for_name("model") is None
    assert formats.format_named("burnpack") is burnpack.FORMAT
    with pytest.raises(UnsupportedFormatError, match="known formats"):
        formats.format_named("onnx")


def test_open_reader_picks_the_format_and_every_reader_speaks_one_protocol(
    tmp_path: Path,
) -> None:
    for path in _files(tmp_path).values():
        with formats.open_reader(path) as reader:
            assert reader.names() == ["w"] and "w" in reader and len(reader) == 1
            np.testing.assert_array_equal(reader.get("w"), ENTRIES[0].data)
            np.testing.assert_array_equal(reader.get_slice("w")[1:, ::2], [[3.0, 5.0]])
            assert isinstance(reader.metadata(), dict)


def test_one_extension_rule_for_reader_writer_and_store(tmp_path: Path) -> None:
    base = tmp_path / "c"
    assert path_for_write(base, "bpk") == f"{base}.bpk"
    assert path_for_read(base, "bpk") == f"{base}.bpk"  # c does not exist: Burn tries c.bpk
    assert path_for_write(tmp_path / "c.x", "bpk") == f"{tmp_path}/c.x"
    assert path_for_write(base, None) == str(base)
    written = burnpack.write_file(base, ENTRIES)
    assert written == f"{base}.bpk"
    with burnpack.BurnpackReader.from_file(base) as pack:  # finds c.bpk, as the store does
        assert pack.names() == ["w"]
    base.write_bytes(burnpack.write_bytes([]))  # now a file named exactly c exists
    assert path_for_read(base, "bpk") == str(base)
    with burnpack.BurnpackReader.from_file(base) as pack:
        assert pack.names() == []
