"""What fuzzing found (issue 11), one class at a time, each as the smallest file that shows it.

Every failure is one of our errors, naming the file (and the tensor, where one is at fault),
with a short message; never a foreign exception, a hang or an allocation the file size does not
bound. Files that hung or exhausted memory before the fix are read in a child process with a
time limit and a memory cap (`_in_child`), so that a regression fails the test instead of the
test run.

1. Shapes NumPy cannot hold: too many dimensions, byte counts past ssize_t (zero-element
   tensors included), a huge stride on a size-1 dimension, and expanded views whose copy would
   be huge.
2. Messages and listings that `repr()` a shared-reference graph.
3. Integers too long to print (past 4,300 digits) or long enough to swell a message.
4. Tensor names whose total size the file multiplies (one long key over many tensors).
5. Damaged LZMA and bzip2 members of a zip checkpoint.
6. torch's negative bit on a dtype torch cannot negate (bool).
7. Found while fixing these: constructors (``set``, ``bytearray``, NumPy's ``_frombuffer``)
   called again and again on one shared argument, each call cheap in the pickle and costly to
   run, whose work and copies the file size did not bound.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.pytorch_reader._support import (
    exercise,
    op_call,
    op_dict,
    op_global,
    op_int,
    op_list,
    op_storage,
    op_str,
    op_tensor,
    op_tuple,
    pickle_of,
    rewrite_zip,
    torch_style_tar,
    write_tar,
    write_zip,
)
from weightstore.errors import (
    ArchiveError,
    DescriptorError,
    DTypeError,
    LimitExceeded,
    PickleError,
    WeightstoreError,
)
from weightstore.pytorch_reader import PytorchReader
from weightstore.pytorch_reader._layout import (
    MAGIC_NUMBER,
    MAX_ARRAY_SIZE,
    MAX_EXPANDED_SIZE,
    MAX_LONG_SIZE,
    MAX_NAMES_SIZE,
    MAX_NDIM,
    PROTOCOL_VERSION,
)
from weightstore.pytorch_reader._walk import NAMING_SHARE, short_repr

ROOT = Path(__file__).resolve().parents[2]
MESSAGE_BOUND = 2_000  # characters; every message built from file content stays this short
CHILD_TIMEOUT = 30  # seconds; each file here reads in well under one
CHILD_MEMORY = 3 * 2**30  # bytes of address space for the child process

# -- building hostile pickles --------------------------------------------------------------------


def op_long4(value: int) -> bytes:
    """LONG4: any int, in two's complement with a 4-byte length."""
    raw = value.to_bytes(value.bit_length() // 8 + 1, "little", signed=True)
    return b"\x8b" + struct.pack("<i", len(raw)) + raw


def op_text_long(digits: int) -> bytes:
    """LONG, the protocol 0 text form: an int of `digits` nines."""
    return b"L" + b"9" * digits + b"L\n"


def doubling(levels: int, leaf: bytes) -> bytes:
    """Pushes a list `levels` deep whose every level holds the level below twice: 2**levels
    paths in a pickle of about 8 bytes a level (memo slots 0 to `levels`)."""
    body = op_list(leaf) + b"q\x00"
    for level in range(1, levels + 1):
        below = bytes([level - 1])
        body += b"0(h" + below + b"h" + below + b"lq" + bytes([level])
    return body


BOMB = doubling(40, op_int(7))  # 2**40 paths to one int: repr() of it never finishes
F32 = np.arange(4, dtype="<f4")
W = op_tensor(op_storage("0", 4), 0, (4,), (1,))  # a 4-float tensor over storage "0"


def rebuild_v2(
    storage: bytes, offset: bytes, size: bytes, stride: bytes, meta: bytes = b""
) -> bytes:
    """``_rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()[, meta])``."""
    return op_call(
        op_global("torch._utils", "_rebuild_tensor_v2"),
        storage,
        offset,
        size,
        stride,
        b"\x89",
        op_call(op_global("collections", "OrderedDict")),
        *([meta] if meta else []),
    )


def ints(*values: int) -> bytes:
    return op_tuple(*map(op_int, values))


def one_tensor(tmp_path: Path, tensor: bytes, storage: bytes = F32.tobytes()) -> Path:
    """A zip checkpoint ``{"t": tensor}`` over storage ``"0"``."""
    return write_zip(tmp_path / "t.pt", pickle_of(op_dict([(op_str("t"), tensor)])), {"0": storage})


def zip_of(tmp_path: Path, body: bytes, storages: dict[str, bytes] | None = None) -> Path:
    return write_zip(tmp_path / "f.pt", pickle_of(body), storages or {"0": F32.tobytes()})


def legacy_of(tmp_path: Path, root: bytes, keys: bytes, storages: bytes = b"") -> Path:
    path = tmp_path / "legacy.pt"
    path.write_bytes(
        pickle_of(op_int(MAGIC_NUMBER))
        + pickle_of(op_int(PROTOCOL_VERSION))
        + pickle_of(op_dict([(op_str("little_endian"), b"\x88")]))
        + pickle_of(root)
        + pickle_of(keys)
        + storages
    )
    return path


def assert_short(error: BaseException) -> None:
    assert len(str(error)) < MESSAGE_BOUND, str(error)[:300]


def assert_typed(path: Path, kind: type[WeightstoreError] = WeightstoreError, **limits: int) -> Any:
    """`exercise` fails with `kind`, naming the file, in a short message; returns the error."""
    with pytest.raises(kind) as caught:
        exercise(path, **limits)
    assert caught.value.path == str(path)
    assert_short(caught.value)
    return caught.value


# -- a child process for files that once hung or ran out of memory -------------------------------

_CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
from tests.pytorch_reader._support import exercise
from weightstore.errors import WeightstoreError
from weightstore.pytorch_reader import PytorchReader
path, action, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
result = {{"error": None}}
try:
    if action == "exercise":
        exercise(path, **options)
    else:
        with PytorchReader(path, **options) as reader:
            result["value"] = getattr(reader, action)()
except WeightstoreError as err:
    result = {{"error": type(err).__name__, "size": len(str(err)), "path": err.path,
              "tensor": err.tensor, "what": getattr(err, "what", None)}}
print(json.dumps(result))
"""


def _in_child(path: Path, action: str = "exercise", **options: Any) -> dict[str, Any]:
    """Run `action` (``"exercise"``, or a reader method taking no argument) on `path` in a
    fresh interpreter with a memory cap, and return what it reports; a hang, a crash or a
    foreign exception fails the test."""
    code = _CHILD.format(memory=CHILD_MEMORY)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(path), action, json.dumps(options)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            cwd=ROOT,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{action} on {path.name} ran past {CHILD_TIMEOUT} s")
    assert done.returncode == 0, done.stderr[-2_000:]
    result: dict[str, Any] = json.loads(done.stdout)
    if result["error"] is not None:
        assert result["path"] == str(path)
        assert result["size"] < MESSAGE_BOUND
    return result


# -- 1. shapes NumPy cannot hold ----------------------------------------------------------------


def test_more_dimensions_than_numpy_holds_fail_at_validation(tmp_path: Path) -> None:
    ndim = MAX_NDIM + 1
    tensor = rebuild_v2(op_storage("0", 4), op_int(0), ints(*[1] * ndim), ints(*[1] * ndim))
    path = one_tensor(tmp_path, tensor)
    with PytorchReader(path) as reader:  # the file opens; only that tensor is refused
        assert reader.names() == ["t"]
        for touch in (reader.tensor, reader.get, reader.get_slice):
            with pytest.raises(LimitExceeded) as caught:
                touch("t")
            assert (caught.value.tensor, caught.value.path) == ("t", str(path))
            assert (caught.value.found, caught.value.limit) == (ndim, MAX_NDIM)
        reader.metadata()
        reader.others()


@pytest.mark.parametrize(
    ("size", "stride"),
    [
        ((2**32, 2**32), (0, 0)),  # 2**64 elements over one
        ((2**62, 3), (0, 0)),
        ((0, 2**62), (1, 1)),  # no elements, yet NumPy counts 2**64 bytes
        ((0, 2**63 - 1), (1, 1)),
        ((2**61, 0, 2**3), (1, 1, 1)),
    ],
    ids=["2**64 elements", "2**62 by 3", "zero by 2**62", "zero by 2**63-1", "zero in the middle"],
)
def test_shapes_past_ssize_t_fail_at_validation(
    tmp_path: Path, size: tuple[int, ...], stride: tuple[int, ...]
) -> None:
    path = one_tensor(
        tmp_path, rebuild_v2(op_storage("0", 4), op_int(0), ints(*size), ints(*stride))
    )
    with PytorchReader(path) as reader:
        with pytest.raises(LimitExceeded) as caught:
            reader.tensor("t")
        assert (caught.value.tensor, caught.value.limit) == ("t", MAX_ARRAY_SIZE)
        assert_short(caught.value)
        with pytest.raises(LimitExceeded):
            reader.get_slice("t")
    assert_typed(path, LimitExceeded)


@pytest.mark.parametrize(
    ("size", "stride", "expected"),
    [
        ((1,), (2**61,), [0.0]),
        ((1,), (2**63 - 1,), [0.0]),
        ((2, 1), (1, 2**62), [[0.0], [1.0]]),
        ((1, 2), (2**62, 2), [[0.0, 2.0]]),
    ],
    ids=["2**61", "2**63-1", "inner", "outer"],
)
def test_a_size_one_dimension_reads_whatever_its_stride(
    tmp_path: Path, size: tuple[int, ...], stride: tuple[int, ...], expected: list[Any]
) -> None:
    # torch reads these: a size-1 dimension never steps, so its stride is never used.
    path = one_tensor(
        tmp_path, rebuild_v2(op_storage("0", 4), op_int(0), ints(*size), ints(*stride))
    )
    with PytorchReader(path) as reader:
        assert reader.get("t").tolist() == expected
        assert reader.get_slice("t")[...].tolist() == expected


def test_a_size_one_stride_matches_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    base = torch.arange(4, dtype=torch.float32)
    tensors = {"a": base.as_strided((1,), (2**61,)), "b": base.as_strided((2, 1), (2, 2**62))}
    path = tmp_path / "strided.pt"
    torch.save(tensors, path)
    with PytorchReader(path) as reader:
        for name, tensor in tensors.items():
            assert reader.get(name).tolist() == tensor.tolist(), name


def test_an_expanded_view_whose_copy_is_huge_is_refused(tmp_path: Path) -> None:
    tensor = rebuild_v2(op_storage("0", 4), op_int(0), ints(2**20, 2**20), ints(0, 0))
    path = one_tensor(tmp_path, tensor)  # 4 TiB of one repeated float, from 16 bytes
    with PytorchReader(path) as reader:
        with pytest.raises(LimitExceeded) as caught:
            reader.tensor("t")
        assert (caught.value.tensor, caught.value.limit) == ("t", MAX_EXPANDED_SIZE)
        assert caught.value.found == 4 * 2**40
    with PytorchReader(path, max_expanded_size=2**43) as reader:
        assert reader.tensor("t").shape == (2**20, 2**20)  # trusted: validated, not read here


def test_expanded_views_within_the_limit_read(tmp_path: Path) -> None:
    tensor = rebuild_v2(op_storage("0", 4), op_int(2), ints(3, 4), ints(0, 0))
    with PytorchReader(one_tensor(tmp_path, tensor)) as reader:
        assert reader.get("t").tolist() == [[2.0] * 4] * 3
    limited = PytorchReader(one_tensor(tmp_path, tensor), max_expanded_size=16)
    with limited as reader, pytest.raises(LimitExceeded):
        reader.get("t")  # 48 bytes from a 16-byte storage


# -- 2. rendering shared-reference graphs -------------------------------------------------------


def _cpu_tensor_of(data: bytes, device: bytes = op_str("cpu")) -> bytes:
    return op_call(
        op_global("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"),
        data,
        op_global("torch", "float32"),
        device,
        b"\x89",
    )


GRAPH_MESSAGES = {
    "rebuild_from_type args": op_call(
        op_global("torch._tensor", "_rebuild_from_type_v2"),
        op_global("torch._utils", "_rebuild_tensor_v2"),
        op_global("torch", "Tensor"),
        BOMB,
        b"N",
    ),
    "cpu tensor data": _cpu_tensor_of(BOMB),
    "cpu tensor device": _cpu_tensor_of(W, BOMB),
}


@pytest.mark.parametrize("body", GRAPH_MESSAGES.values(), ids=GRAPH_MESSAGES.keys())
def test_a_graph_in_a_zip_message_renders_bounded(tmp_path: Path, body: bytes) -> None:
    result = _in_child(zip_of(tmp_path, op_dict([(op_str("t"), body)])))
    assert result["error"] in ("PickleError", "UnsupportedFormatError", None)


def test_a_graph_as_a_legacy_persistent_id_renders_bounded(tmp_path: Path) -> None:
    root = op_dict([(op_str("t"), BOMB + b"Q")])
    result = _in_child(legacy_of(tmp_path, root, op_list()))
    assert result["error"] == "PickleError"


@pytest.mark.parametrize("where", ["count", "view", "storage key", "tensor type", "pid"])
def test_a_graph_in_a_tar_record_renders_bounded(tmp_path: Path, where: str) -> None:
    count = BOMB if where == "count" else op_int(1)
    storage_key = BOMB if where == "storage key" else op_int(1)
    header = pickle_of(op_tuple(storage_key, op_str("cpu"), op_global("torch", "FloatStorage")))
    view = op_tuple(BOMB, op_int(7), op_int(0), op_int(1)) if where == "view" else None
    blob = pickle_of(count) + header + struct.pack("<q", 4) + F32.tobytes()
    blob += pickle_of(op_list(*([view] if view else [])))
    type_name = BOMB if where == "tensor type" else op_str("torch.FloatTensor")
    on = op_int(9) if where == "tensor type" else op_int(1)  # an unknown storage: type decides
    tensors = pickle_of(op_int(1)) + pickle_of(op_tuple(op_int(2), on, type_name))
    tensors += struct.pack("<i4x3q", 1, 4, 1, 0)
    pid = BOMB if where == "pid" else op_str("2")
    path = write_tar(
        tmp_path / "t.tar",
        {
            "storages": blob,
            "tensors": tensors,
            "pickle": pickle_of(op_dict([(op_str("x"), pid + b"Q")])),
        },
    )
    assert _in_child(path)["error"] is not None


def test_others_walks_a_shared_graph_once(tmp_path: Path) -> None:
    # A thousand top-level keys over one 2**17-path graph without tensors: each key was walked
    # on its own, all of them together 262 million visits.
    graph = doubling(17, op_int(1))
    keys = [(op_str(f"k{i}"), b"h\x11") for i in range(1000)]
    body = graph + b"0" + op_dict([(op_str("w"), W), *keys])
    result = _in_child(zip_of(tmp_path, body), "others", top_level_key="w")
    assert result["error"] is None
    assert sorted(result["value"]) == sorted(f"k{i}" for i in range(1000))
    assert all(len(text) <= 60 for text in result["value"].values())


def test_a_graph_without_tensors_costs_its_size_not_its_paths(tmp_path: Path) -> None:
    body = op_dict([(op_str("w"), W), (op_str("g"), BOMB)])  # 2**40 paths, 81 containers
    # Naming may visit max_nodes // NAMING_SHARE values: 1,000 of them here.
    with PytorchReader(zip_of(tmp_path, body), max_nodes=1_000 * NAMING_SHARE) as reader:
        assert reader.names() == ["w"]
        assert reader.others() == {"g": short_repr(reader.load_object("g"))}
        assert reader.others()["g"].startswith("[[[[[[[[...")


def cyclic_doubling(levels: int) -> bytes:
    """Pushes `doubling`'s graph with no leaf, its bottom list holding the top one: every level
    is on a cycle through all the others, and from any of them 2**levels paths lead back."""
    body = b"]q\x00"
    for level in range(1, levels + 1):
        below = bytes([level - 1])
        body += b"0(h" + below + b"h" + below + b"lq" + bytes([level])
    return body + b"0h\x00h" + bytes([levels]) + b"a"  # bottom.append(top)


def test_a_cycle_without_tensors_costs_its_size_not_its_paths(tmp_path: Path) -> None:
    # A 1.4 KB fuzz input: a doubling graph 43 levels deep whose bottom holds its top. Each
    # level led back up a cycle, so none was known to hold no tensor, and every read of the
    # file walked its 2**43 paths until naming's budget ran out.
    body = op_dict([(op_str("w"), W), (op_str("g"), cyclic_doubling(40))])
    with PytorchReader(zip_of(tmp_path, body), max_nodes=1_000 * NAMING_SHARE) as reader:
        assert reader.names() == ["w"]
        assert list(reader.others()) == ["g"]


def test_the_shared_graph_shortcut_keeps_names_a_cycle_hides(tmp_path: Path) -> None:
    # root = [P, Q], P = [Q, t], Q = [P]: walked from P, Q holds no tensor only because its
    # path back to P is a cycle; walked from the root, Q leads to t. Both names are kept.
    p_list = b"]q\x01"  # P, empty for now, in memo 1
    q_list = b"](h\x01eq\x02"  # Q = [P] in memo 2
    fill_p = b"0h\x01(h\x02" + W + b"e"  # P += [Q, t]
    body = p_list + q_list + fill_p + b"0(h\x01h\x02l"
    with PytorchReader(zip_of(tmp_path, body)) as reader:
        assert reader.names() == ["0.1", "1.0.1"]


def test_a_long_storage_kind_renders_bounded(tmp_path: Path) -> None:
    kind = op_str("s" * 2**20)
    pid = op_tuple(kind, op_global("torch", "FloatStorage"), op_str("0"), op_str("cpu"), op_int(4))
    tensor = rebuild_v2(pid + b"Q", op_int(0), ints(4), ints(1))
    assert_typed(one_tensor(tmp_path, tensor), PickleError)


def test_a_failing_argument_line_renders_bounded(tmp_path: Path) -> None:
    body = op_dict([(op_str("f"), b"F" + b"x" * 60_000 + b"\n")])  # float() quotes it whole
    assert_typed(zip_of(tmp_path, body), PickleError)


def test_long_names_render_bounded_in_reprs_and_others(tmp_path: Path) -> None:
    name = "n" * 2**20
    body = op_dict([
        (op_str(name), W),
        (op_str("cfg"), op_dict([(op_str("k"), op_str(name)), (op_str("evil"),
         op_call(op_str("m" * 2**20) + op_str("f") + b"\x93", op_int(1)))])),
    ])  # fmt: skip
    with PytorchReader(zip_of(tmp_path, body)) as reader:
        assert len(repr(reader.tensor(name))) < MESSAGE_BOUND
        assert len(reader.others()["cfg"]) <= 60
        assert len(reader.others(limit=1_000)["cfg"]) <= 1_000
        assert len(repr(reader.load_object("cfg")["evil"])) < MESSAGE_BOUND


# -- 3. integers too long to print ---------------------------------------------------------------

HUGE = op_long4(10**5000)  # LONG4 of 2,077 bytes: 5,001 digits


@pytest.mark.parametrize(
    "body",
    [
        op_dict([(op_str("w"), W), (HUGE, op_int(1))]),
        op_dict([(op_str("w"), W), (op_str("v"), HUGE)]),
        op_dict([(op_str("t"), rebuild_v2(op_storage("0", 4), HUGE, ints(4), ints(1)))]),
        op_dict([(op_str("t"), rebuild_v2(
            op_tuple(op_str("storage"), op_global("torch", "FloatStorage"), HUGE, op_str("cpu"),
                     op_int(4)) + b"Q", op_int(0), ints(4), ints(1)))]),
    ],
    ids=["dict key", "value", "storage offset", "storage key"],
)  # fmt: skip
def test_a_long4_past_the_digit_limit_is_refused(tmp_path: Path, body: bytes) -> None:
    error = assert_typed(zip_of(tmp_path, body), LimitExceeded)
    assert (error.found, error.limit) == (2_077, MAX_LONG_SIZE)


def test_a_long4_tar_count_is_refused(tmp_path: Path) -> None:
    blob = pickle_of(HUGE)
    path = write_tar(tmp_path / "t.tar", {"storages": blob, "pickle": pickle_of(op_dict([]))})
    assert_typed(path, LimitExceeded)


def test_a_long4_legacy_key_is_refused(tmp_path: Path) -> None:
    assert_typed(legacy_of(tmp_path, op_dict([]), op_list(HUGE)), LimitExceeded)


def test_ints_within_the_limit_read_and_render_bounded(tmp_path: Path) -> None:
    wide = 2**2000 - 1  # LONG1 of 251 bytes: 603 digits
    body = op_dict([
        (op_str("w"), W),
        (op_str("wide"), op_int(wide)),
        (op_str("text"), op_text_long(4_299)),  # with its "L", at MAX_DIGITS
        (op_text_long(4_000), op_str("a key")),
        (op_str("long4"), op_long4(-(2**10_000))),
    ])  # fmt: skip
    with PytorchReader(zip_of(tmp_path, body)) as reader:
        assert reader.load_object("wide") == wide
        assert reader.load_object("text") == 10**4299 - 1
        assert reader.load_object("long4") == -(2**10_000)
        others = reader.others()
        assert others["wide"] == "<int of 2,000 bits>"
        assert others["long4"] == "<int of 10,001 bits>"
        assert all(len(key) <= 60 and len(text) <= 60 for key, text in others.items())


@pytest.mark.parametrize("where", ["offset", "view offset", "numel"])
def test_long_ints_in_a_view_render_bounded(tmp_path: Path, where: str) -> None:
    long = op_text_long(4_000)
    view = op_tuple(op_str("v"), long, op_int(1)) if where == "view offset" else b"N"
    numel = b"L-" + b"9" * 4_000 + b"L\n" if where == "numel" else op_int(4)
    pid = op_tuple(op_str("storage"), op_global("torch", "FloatStorage"), op_str("k"),
                   op_str("cpu"), numel, view) + b"Q"  # fmt: skip
    offset = long if where == "offset" else op_int(0)
    root = op_dict([(op_str("t"), rebuild_v2(pid, offset, ints(1), ints(1)))])
    path = legacy_of(tmp_path, root, op_list(op_str("k")), struct.pack("<q", 4) + F32.tobytes())
    assert_typed(path)


def test_long_tar_counts_render_bounded(tmp_path: Path) -> None:
    path = write_tar(
        tmp_path / "t.tar",
        {"storages": pickle_of(op_text_long(4_000)), "pickle": pickle_of(op_dict([]))},
    )
    assert_typed(path)


# -- 4. the total size of tensor names ----------------------------------------------------------


def _long_key_over_copies(key_size: int, copies: int) -> bytes:
    tensor = W + b"r" + struct.pack("<I", 0)
    items = b"j" + struct.pack("<I", 0)
    return op_dict([(op_str("k" * key_size), b"](" + tensor + items * (copies - 1) + b"e")])


def test_names_past_their_total_size_are_refused(tmp_path: Path) -> None:
    # one 1 MiB key over 20,000 copies of one tensor: 20 GB of names from a 1 MiB pickle
    path = zip_of(tmp_path, _long_key_over_copies(2**20, 20_000))
    result = _in_child(path, "names")
    assert (result["error"], result["what"]) == ("LimitExceeded", "bytes of tensor names")


def test_the_names_limit_is_an_option(tmp_path: Path) -> None:
    path = zip_of(tmp_path, _long_key_over_copies(100, 20))
    with PytorchReader(path) as reader:
        assert len(reader.names()) == 20
    limited = PytorchReader(path, max_names_size=1_000)
    with limited as reader, pytest.raises(LimitExceeded) as caught:
        reader.names()
    assert (caught.value.what, caught.value.limit) == ("bytes of tensor names", 1_000)
    assert caught.value.found > 1_000
    assert MAX_NAMES_SIZE >= 2**26


def test_a_long_key_over_many_values_costs_no_name_building(tmp_path: Path) -> None:
    # a 4 MiB key over a million values that hold no tensor: no name is ever built (building
    # each path's name copied 4 TB)
    body = op_dict([(op_str("k" * 2**22), b"](" + b"N" * 1_000_000 + b"e")])
    assert _in_child(zip_of(tmp_path, body), "names") == {"error": None, "value": []}


# -- 5. damaged compressed members --------------------------------------------------------------


@pytest.mark.parametrize("compression", [zipfile.ZIP_LZMA, zipfile.ZIP_BZIP2])
@pytest.mark.parametrize("member", ["data.pkl", "data/0"])
def test_a_damaged_compressed_member_is_an_archive_error(
    tmp_path: Path, compression: int, member: str
) -> None:
    plain = one_tensor(tmp_path, W)
    path = rewrite_zip(plain, tmp_path / "packed.pt", compression=compression)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(f"archive/{member}")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for offset in range(start + 4, start + min(info.compress_size, 12)):
        data[offset] ^= 0x5A
    path.write_bytes(bytes(data))
    error = assert_typed(path, ArchiveError)
    assert error.entry == f"archive/{member}"


# -- 6. torch's negative bit --------------------------------------------------------------------

NEG = b"}" + op_str("neg") + b"\x88s"


def rebuild_v3(dtype: str, size: int, itemsize: int, meta: bytes) -> bytes:
    """``_rebuild_tensor_v3`` of a 1-d tensor of `size` `dtype` elements (an untyped storage)."""
    storage = op_storage("0", size * itemsize, "UntypedStorage")
    return op_call(
        op_global("torch._utils", "_rebuild_tensor_v3"),
        storage,
        op_int(0),
        ints(size),
        ints(1),
        b"\x89",
        op_call(op_global("collections", "OrderedDict")),
        op_global("torch", dtype),
        meta,
    )


@pytest.mark.parametrize(
    ("dtype", "itemsize"), [("bool", 1), ("uint16", 2), ("uint64", 8), ("float8_e4m3fn", 1)]
)
def test_a_negative_bit_torch_cannot_apply_is_refused(
    tmp_path: Path, dtype: str, itemsize: int
) -> None:
    path = one_tensor(tmp_path, rebuild_v3(dtype, 2, itemsize, NEG), bytes(2 * itemsize))
    with PytorchReader(path) as reader:
        assert reader.names() == ["t"]
        for touch in (reader.tensor, reader.get):
            with pytest.raises(DTypeError) as caught:
                touch("t")
            assert (caught.value.tensor, caught.value.path) == ("t", str(path))
            assert dtype in str(caught.value)
    bool_v2 = rebuild_v2(op_storage("0", 2, "BoolStorage"), op_int(0), ints(2), ints(1), NEG)
    with (
        PytorchReader(one_tensor(tmp_path, bool_v2, bytes(2))) as reader,
        pytest.raises(DTypeError),
    ):
        reader.get("t")


def test_a_negative_bit_is_applied_where_torch_applies_it(tmp_path: Path) -> None:
    tensor = rebuild_v2(op_storage("0", 4, "CharStorage"), op_int(0), ints(4), ints(1), NEG)
    with PytorchReader(one_tensor(tmp_path, tensor, bytes([1, 2, 3, 0x80]))) as reader:
        assert reader.get("t").tolist() == [-1, -2, -3, -128]  # int8 wraps, as torch's does


def test_torch_refuses_a_negative_bool_as_we_do(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    flags = torch.tensor([True, False])
    torch._C._set_neg(flags, True)
    path = tmp_path / "neg.pt"
    torch.save({"t": flags}, path)
    with pytest.raises(NotImplementedError):
        torch.load(path)["t"].resolve_neg()
    with PytorchReader(path) as reader, pytest.raises(DTypeError):
        reader.get("t")


# -- 7. repeated constructor calls on one shared argument ----------------------------------------


def _calls(setup: bytes, times: int, *, keep: bool = False) -> bytes:
    """`setup` leaves the argument tuple in memo 0 and the callee in memo 1; then `times`
    calls of memo 1 with memo 0 (5 bytes of pickle a call), their results dropped or kept in
    one list."""
    if keep:
        return setup + b"](" + b"h\x01h\x00R" * times + b"e"
    return setup + b"h\x01h\x00R0" * times + b"N"


def test_a_constructor_iterating_one_big_list_again_is_charged(tmp_path: Path) -> None:
    # set() over the same 100,000 ints a hundred times: 10 million items hashed, from 200 KB
    items = b"](" + b"K\x01" * 100_000 + b"e"
    setup = op_tuple(items) + b"q\x000" + op_global("builtins", "set") + b"q\x010"
    path = zip_of(tmp_path, _calls(setup, 100), {})
    error = assert_typed(path, LimitExceeded, max_nodes=1_000_000)
    assert error.what == "work (opcodes run and key elements hashed)"


@pytest.mark.parametrize(
    "setup",
    [
        op_tuple(b"B" + struct.pack("<I", 2**20) + bytes(2**20)) + b"q\x000"
        + op_global("builtins", "bytearray") + b"q\x010",
        op_tuple(op_str("x" * 2**20), op_str("latin1")) + b"q\x000"
        + op_global("_codecs", "encode") + b"q\x010",
        op_tuple(b"B" + struct.pack("<I", 2**20) + bytes(2**20),
                 op_call(op_global("numpy", "dtype"), op_str("u1")) + b"(K\x03U\x01|NNNJ\xff\xff"
                 b"\xff\xffJ\xff\xff\xff\xffK\x00tb", ints(2**20), op_str("C")) + b"q\x000"
        + op_global("numpy.core.numeric", "_frombuffer") + b"q\x010",
    ],
    ids=["bytearray", "_codecs.encode", "numpy _frombuffer"],
)  # fmt: skip
def test_copies_of_one_shared_blob_are_bounded(tmp_path: Path, setup: bytes) -> None:
    # 3,000 copies of one 1 MiB blob, all kept: 3 GB built from a 1 MiB pickle
    path = zip_of(tmp_path, _calls(setup, 3_000, keep=True), {})
    result = _in_child(path)
    assert result["error"] == "LimitExceeded"
    assert result["what"] == "bytes built by constructors (arrays, bytes, strings)"


def test_a_shared_module_state_is_scanned_within_the_budget(tmp_path: Path) -> None:
    # One pickled nn.Module whose _parameters hold one tensor and 200,000 Nones, listed 20,000
    # times: naming scanned them all on every visit (4 billion steps from 1.2 MB).
    pairs = b"".join(b"J" + struct.pack("<i", i) + b"N" for i in range(200_000))
    nones = b"}(" + pairs + op_str("w") + W + b"u"
    state = op_dict([(op_str("_parameters"), nones), (op_str("_modules"), b"}")])
    module = op_global("m", "Module") + b")\x81" + state + b"b" + b"q\x000"
    body = module + op_dict([(op_str("w"), W), (op_str("many"), b"](" + b"h\x00" * 20_000 + b"e")])
    result = _in_child(zip_of(tmp_path, body), "names", max_nodes=2_000_000)
    assert result["error"] == "LimitExceeded"
    assert result["what"] == "values visited while naming tensors"


# -- everything at once: the fuzz harness's reads -------------------------------------------------


def test_the_fuzz_targets_reads_stay_typed_on_each_class(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from fuzz import targets
    except ImportError:
        pytest.skip("no fuzz harness in this checkout")
    finally:
        sys.path.remove(str(ROOT))
    files = [
        one_tensor(tmp_path, rebuild_v2(op_storage("0", 4), op_int(0), ints(0, 2**62), ints(1, 1))),
        one_tensor(tmp_path, rebuild_v2(op_storage("0", 4), op_int(0), ints(1), ints(2**61))),
        one_tensor(tmp_path, rebuild_v3("bool", 2, 1, NEG), bytes(2)),
    ]
    for path in files:
        targets.check("pytorch", path.read_bytes())


def test_ordinary_files_still_read(tmp_path: Path) -> None:
    storages = [(1, "FloatStorage", F32)]
    tensors = [(2, 1, "torch.FloatTensor", (2, 2), (2, 1), 0)]
    root = op_dict([(op_str("x"), op_str("2") + b"Q")])
    with PytorchReader(torch_style_tar(tmp_path / "t.tar", storages, tensors, root)) as reader:
        assert reader.get("x").tolist() == [[0.0, 1.0], [2.0, 3.0]]
    with pytest.raises(DescriptorError):  # a view past its storage is still refused
        PytorchReader(one_tensor(tmp_path, op_tensor(op_storage("0", 4), 3, (2,), (1,)))).get("t")
