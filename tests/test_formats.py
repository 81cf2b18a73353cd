"""The format registry: one record per format, detection from bytes, the extension rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    op_dict,
    op_storage,
    op_str,
    op_tensor,
    pickle_of,
    write_zip,
)
from weightstore import (
    BurnpackStore,
    SafetensorsStore,
    Store,
    burnpack,
    formats,
    gguf,
    open_reader,
    pytorch_reader,
    safetensors,
)
from weightstore.container._format import PROBE_SIZE, path_for_read, path_for_write
from weightstore.entry import TensorEntry
from weightstore.errors import FormatError, TruncatedError, UnsupportedFormatError
from weightstore.safetensors._layout import MAX_HEADER_SIZE

WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3)
ENTRIES = [TensorEntry.from_array("w", WEIGHT)]


def _files(tmp_path: Path) -> dict[str, Path]:
    bpk, st = tmp_path / "m.bpk", tmp_path / "m.safetensors"
    burnpack.write_file(bpk, ENTRIES)
    safetensors.write_file(st, ENTRIES)
    return {"burnpack": bpk, "safetensors": st}


def test_every_format_is_registered_once_in_sniff_order() -> None:
    assert [fmt.name for fmt in formats.FORMATS] == ["burnpack", "safetensors", "pytorch", "gguf"]
    assert formats.FORMATS == (
        burnpack.FORMAT, safetensors.FORMAT, pytorch_reader.FORMAT, gguf.FORMAT,
    )  # fmt: skip
    assert [fmt.writable for fmt in formats.FORMATS] == [True, True, False, True]


def test_detection_reads_bytes_not_names(tmp_path: Path) -> None:
    for name, path in _files(tmp_path).items():
        disguised = path.rename(tmp_path / f"{name}.bin")  # the extension lies
        assert formats.detect_format(disguised).name == name


@pytest.mark.parametrize(
    ("head", "name"),
    [(b"PK\x03\x04" + bytes(60), "pytorch"), (b"\x80\x02}q\x00.", "pytorch"),
     (b"L119547037146038801333356\n.", "pytorch"), (bytes(257) + b"ustar" + bytes(250), "pytorch"),
     (b"NRUB\x01\x00\x00\x00\x00\x00", "burnpack"),
     (b"\x02\x00\x00\x00\x00\x00\x00\x00{}", "safetensors"),
     (bytes.fromhex("504b0304 00000808") + b"{", "pytorch")],  # torch's zip, "{" at byte 8
)  # fmt: skip
def test_each_signature_is_recognised(head: bytes, name: str) -> None:
    assert formats.detect_format_of_bytes(head[:PROBE_SIZE], len(head)).name == name


def _safetensors_starting_like_a_pickle() -> bytes:
    header = b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    header += b" " * (0x80 - len(header))  # N = 128: the file starts with byte 0x80, as pickles do
    return len(header).to_bytes(8, "little") + header + b"\x07"


def test_a_safetensors_header_length_that_starts_like_a_pickle_is_still_safetensors() -> None:
    data = _safetensors_starting_like_a_pickle()
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


def test_a_plausible_header_length_past_the_end_is_a_truncated_safetensors_file() -> None:
    # Before, the length had to fit the file, so a cut file was "not a SafeTensors file".
    head = (10**6).to_bytes(8, "little") + b"{}"
    assert formats.detect_format_of_bytes(head, len(head)) is safetensors.FORMAT
    with pytest.raises(TruncatedError) as caught:
        safetensors.SafetensorsReader.from_bytes(head)
    assert (caught.value.expected, caught.value.found) == (10**6, 2)


def test_a_header_length_over_the_limit_counts_only_when_the_file_holds_it() -> None:
    over = MAX_HEADER_SIZE + 1
    head = over.to_bytes(8, "little") + b"{}"
    with pytest.raises(UnsupportedFormatError):  # past the end and past the limit: no length
        formats.detect_format_of_bytes(head, len(head))
    # A header someone trusted with a raised max_header_size= is still recognised.
    assert formats.detect_format_of_bytes(head, 8 + over) is safetensors.FORMAT


@pytest.mark.parametrize(
    ("head", "is_pickle"),
    [(b"\x80\x02", True), (b"\x80\x05\x95", True), (b"\x80\x06", True),  # a future protocol
     (b"\x80", False), (b"\x80\x00\x00\x00", False), (b"\x80\x01\x00\x00", False)],
)  # fmt: skip
def test_a_pickle_is_proto_then_a_protocol_of_2_or_more(head: bytes, is_pickle: bool) -> None:
    # 80 00 and 80 01 begin SafeTensors files with a 128- or 384-byte header, never a pickle.
    assert pytorch_reader.FORMAT.sniff(head, len(head)) is is_pickle


# -- damaged files: recognised by their first bytes, the damage reported by their reader --------


def _pytorch_zip(tmp_path: Path) -> bytes:
    """``torch.save({"w": WEIGHT})``'s layout, assembled without torch."""
    tensor = op_tensor(op_storage("0", WEIGHT.size), 0, WEIGHT.shape, (3, 1))
    pickle = pickle_of(op_dict([(op_str("w"), tensor)]))
    return write_zip(tmp_path / "z.pt", pickle, {"0": WEIGHT.tobytes()}).read_bytes()


def _small_file(kind: str, tmp_path: Path) -> tuple[int, bytes, int]:
    """How many bytes show the signature, the file's bytes, the offset of its first tensor
    byte."""
    if kind == "safetensors, header length 128":
        pickle_like = _safetensors_starting_like_a_pickle()
        return 9, pickle_like, len(pickle_like) - 1
    signature_size, data = {
        "burnpack": (4, burnpack.write_bytes(ENTRIES)),  # the magic
        "safetensors": (9, safetensors.write_bytes(ENTRIES)),  # the length, then "{"
        "pytorch": (4, _pytorch_zip(tmp_path)),  # the zip signature
    }[kind]
    return signature_size, data, data.index(WEIGHT.tobytes())


@pytest.mark.parametrize("kind", ["burnpack", "safetensors", "safetensors, header length 128",
                                  "pytorch"])  # fmt: skip
def test_a_file_cut_anywhere_before_its_first_tensor_byte_is_diagnosed(
    tmp_path: Path, kind: str
) -> None:
    """Every cut is either too short to tell (UnsupportedFormatError), or recognised as its own
    format and refused by that reader with a typed FormatError: never another exception, never
    taken for another of our formats."""
    name = kind.split(",")[0]
    signature_size, data, first_tensor_byte = _small_file(kind, tmp_path)
    cut = tmp_path / "cut.bin"
    for size in range(first_tensor_byte + 1):
        head = data[:size]
        if size < signature_size:
            with pytest.raises(UnsupportedFormatError):
                formats.detect_format_of_bytes(head[:PROBE_SIZE], size)
            continue
        fmt = formats.detect_format_of_bytes(head[:PROBE_SIZE], size)
        assert fmt.name == name, size
        cut.write_bytes(head)
        with pytest.raises(FormatError), fmt.open_file(cut) as reader:
            for tensor in reader.names():
                reader.get(tensor)


def test_a_truncated_file_reports_its_damage_through_every_route(tmp_path: Path) -> None:
    # Before: the registry and the CLI said "not a burnpack, SafeTensors or PyTorch file" for a
    # SafeTensors file cut to 20 bytes, while the reader said what was wrong.
    cut = tmp_path / "cut.safetensors"
    data = safetensors.write_bytes(ENTRIES)
    cut.write_bytes(data[:20])
    with pytest.raises(TruncatedError) as caught:
        open_reader(cut)
    assert caught.value.what == "the JSON header" and caught.value.found == 12
    for store in (Store.from_file(cut), SafetensorsStore.from_file(cut)):
        with pytest.raises(TruncatedError):
            store.keys()
    with pytest.raises(UnsupportedFormatError) as refused:  # another store names the format
        BurnpackStore.from_file(cut).keys()
    assert refused.value.found == "safetensors"


def test_format_for_path_and_format_named() -> None:
    assert formats.format_for_path("a/b.SAFETENSORS") is safetensors.FORMAT
    assert formats.format_for_path("ckpt.pth") is pytorch_reader.FORMAT
    assert formats.format_for_path("model") is None
    assert formats.format_named("burnpack") is burnpack.FORMAT
    with pytest.raises(UnsupportedFormatError, match="known formats"):
        formats.format_named("onnx")


def test_format_for_name_is_the_old_spelling_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match="format_for_path") as caught:
        assert formats.format_for_name("ckpt.pth") is pytorch_reader.FORMAT
    assert caught[0].filename == __file__  # the warning points at the caller


def test_open_reader_picks_the_format_and_every_reader_speaks_one_protocol(
    tmp_path: Path,
) -> None:
    for path in _files(tmp_path).values():
        with open_reader(path) as reader:
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
