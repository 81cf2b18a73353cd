"""TorchScript archives (`_torchscript.py`): ``torch.jit.save`` files list exactly the tensors of
``torch.jit.load(f).state_dict()``, with its names, dtypes, shapes and values, and their code is
read as text, never run.

torch makes the real archives and is the oracle; hand-made archives (the pickle assembler of
`_support` and TorchScript class headers written out here) cover the rules one at a time and
the hostile cases.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import subprocess
import sys
import warnings
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pytorch_reader._support import (
    assert_same,
    exercise,
    op_call,
    op_global,
    op_storage,
    op_str,
    op_tensor,
    op_tuple,
    pickle_of,
    rewrite_zip,
    write_zip,
)
from weightstore import PytorchStore, load_from
from weightstore.errors import (
    ArchiveError,
    LimitExceeded,
    UnsupportedFormatError,
    UnsupportedObjectError,
    WeightstoreError,
)
from weightstore.pytorch_reader import MAX_CODE_SIZE, PytorchReader
from weightstore.pytorch_reader._torchscript import ClassHeader, parse_class_headers

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit is deprecated

# -- hand-made archives -------------------------------------------------------------------------

EMPTY_TUPLE, NEWOBJ, EMPTY_DICT, SETITEM, BUILD = b")", b"\x81", b"}", b"s", b"b"
TWO_FLOATS = bytes.fromhex("0000803f 00000040")  # 1.0f, 2.0f
_COUNTER = itertools.count()  # fresh file names: arrays of an earlier example may map the last


def op_module(cls: str, *attributes: tuple[str, bytes], module: str = "__torch__") -> bytes:
    """A TorchScript module object as torch pickles one: NEWOBJ, then BUILD with a dict of its
    attributes. SETITEM per attribute opens no mark, so modules nest without limit."""
    items = b"".join(op_str(key) + value + SETITEM for key, value in attributes)
    return op_global(module, cls) + EMPTY_TUPLE + NEWOBJ + EMPTY_DICT + items + BUILD


def op_floats(key: str, numel: int = 2) -> bytes:
    return op_tensor(op_storage(key, numel), 0, (numel,), (1,))


def script_archive(
    tmp_path: Path, root: bytes, code: dict[str, str], storages: dict[str, bytes] | None = None
) -> Path:
    """A TorchScript-shaped zip: data.pkl, storages, ``code/<name>`` sources, constants.pkl."""
    extra = {f"code/{name}": text.encode() for name, text in code.items()}
    extra["constants.pkl"] = pickle_of(op_tuple())
    return write_zip(
        tmp_path / "scripted.pt", pickle_of(root), storages or {"0": TWO_FLOATS}, extra=extra
    )


def test_class_headers_are_read_as_text() -> None:
    source = "\n".join(
        [
            "class Net(Module):",
            '  __parameters__ = ["weight", "bias", ]',
            '  __buffers__ = ["mean", "maybe", ]',
            "  weight : Tensor",
            "  bias : NoneType",
            "  mean : Tensor",
            "  maybe : Optional[Tensor]",
            '  __annotations__["0"] = Tensor',
            "  scale : Final[float] = 1.5",
            "  def forward(self: __torch__.Net,",
            "    x: Tensor) -> Tensor:",
            "    weight : Tensor",  # inside a method: not a declaration
            "    return x",
            "class Holder:",
            "  t : Tensor",
            "def helper(x: Tensor) -> Tensor:",
            "  return x",
        ]
    )
    assert parse_class_headers([source.encode()], "code/__torch__.py", None) == {
        "Net": ClassHeader(
            True, ("weight", "bias"), ("mean", "maybe"), frozenset({"weight", "mean", "0"})
        ),
        "Holder": ClassHeader(False, (), (), frozenset({"t"})),
    }


def test_a_module_lists_parameters_then_tensor_buffers_then_submodules(tmp_path: Path) -> None:
    code = {
        "__torch__.py": "\n".join(
            [
                "class Net(Module):",
                '  __parameters__ = ["bias", "weight", ]',
                '  __buffers__ = ["mean", "maybe", ]',
                "  mean : Tensor",
                "  maybe : Optional[Tensor]",
                "  weight : Tensor",
                "  bias : NoneType",
                "  plain : Tensor",
                "  child : __torch__.Child",
                "  holder : __torch__.Holder",
                "class Child(Module):",
                '  __parameters__ = ["w", ]',
                "  __buffers__ = []",
                "  w : Tensor",
                "class Empty(Module):",
                "  __parameters__ = []",
                "class Holder:",
                "  t : Tensor",
            ]
        )
    }
    root = op_module(
        "Net",
        ("mean", op_floats("0")),
        ("maybe", op_floats("0")),  # declared Optional[Tensor]: torch leaves it out
        ("weight", op_floats("0")),
        ("bias", b"N"),  # bias=False
        ("plain", op_floats("0")),  # a tensor attribute that is neither
        ("training", b"\x88"),
        ("child", op_module("Child", ("w", op_floats("0")))),
        ("empty", op_module("Empty")),
        ("holder", op_module("Holder", ("t", op_floats("0")))),  # no module: not walked
    )
    with PytorchReader(script_archive(tmp_path, root, code)) as reader:
        assert reader.names() == ["weight", "mean", "child.w"]
        assert reader.tensor("weight").is_parameter and reader.tensor("child.w").is_parameter
        assert not reader.tensor("mean").is_parameter
        assert reader.get("child.w").tolist() == [1.0, 2.0]
        assert reader.metadata().format == "torchscript"
        assert reader.others() == {}


def test_hostile_code_and_globals_are_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = {
        "__torch__.py": "\n".join(
            [
                "import os",
                f"os.system('touch {marker}')",
                f"open({str(marker)!r}, 'w')",
                "class Net(Module):",
                '  __parameters__ = ["w", ]',
                "  w : Tensor",
                f"  evil : Final[int] = __import__('os').system('touch {marker}')",
                "  def forward(self: __torch__.Net) -> Tensor:",
                f"    os.system('touch {marker}')",
            ]
        )
    }
    evil = op_call(op_global("posix", "system"), op_str(f"touch {marker}"))
    root = op_module("Net", ("w", op_floats("0")), ("evil", evil))
    with PytorchReader(script_archive(tmp_path, root, code)) as reader:
        assert reader.names() == ["w"]
        reader.get("w")
    assert not marker.exists()


def test_a_module_restored_by_its_own_setstate_lists_unreadable_tensors(tmp_path: Path) -> None:
    code = {
        "__torch__.py": "\n".join(
            [
                "class Net(Module):",
                "  __parameters__ = []",
                "  custom : __torch__.Custom",
                "class Custom(Module):",
                '  __parameters__ = ["w", "none", ]',
                "  w : Tensor",
                "  none : NoneType",
            ]
        )
    }
    state = op_tuple(op_floats("0"), b"\x88")  # what its __getstate__ returned
    custom = op_global("__torch__", "Custom") + EMPTY_TUPLE + NEWOBJ + state + BUILD
    with PytorchReader(script_archive(tmp_path, op_module("Net", ("custom", custom)), code)) as r:
        assert r.names() == ["custom.w"]
        with pytest.raises(UnsupportedObjectError) as caught:
            r.get("custom.w")
    assert caught.value.global_name == "__torch__.Custom" and caught.value.tensor == "custom.w"


def test_submodules_a_setstate_would_place_are_refused(tmp_path: Path) -> None:
    code = {"__torch__.py": "class Net(Module):\n  __parameters__ = []\nclass Leaf(Module):\n"}
    state = op_tuple(op_module("Leaf"), b"\x88")
    custom = op_global("__torch__", "Net") + EMPTY_TUPLE + NEWOBJ + state + BUILD
    with pytest.raises(UnsupportedObjectError) as caught:
        PytorchReader(script_archive(tmp_path, op_module("Net", ("inner", custom)), code))
    assert caught.value.global_name == "__torch__.Net" and caught.value.tensor == "inner"


def test_a_module_that_holds_itself_is_walked_once(tmp_path: Path) -> None:
    code = {"__torch__.py": 'class Net(Module):\n  __parameters__ = ["w", ]\n  w : Tensor\n'}
    memo_put, memo_get = b"q\x00", b"h\x00"  # BINPUT 0, BINGET 0
    root = (
        op_global("__torch__", "Net") + EMPTY_TUPLE + NEWOBJ + memo_put + EMPTY_DICT
        + op_str("w") + op_floats("0") + SETITEM + op_str("me") + memo_get + SETITEM + BUILD
    )  # fmt: skip
    with PytorchReader(script_archive(tmp_path, root, code)) as reader:
        assert reader.names() == ["w"]


def test_modules_nested_past_max_depth_are_refused(tmp_path: Path) -> None:
    code = {"__torch__.py": 'class Net(Module):\n  __parameters__ = ["w", ]\n  w : Tensor\n'}
    root = op_module("Net", ("w", op_floats("0")))
    for _ in range(12):
        root = op_module("Net", ("inner", root))
    path = script_archive(tmp_path, root, code)
    with pytest.raises(LimitExceeded) as caught:
        PytorchReader(path, max_depth=8)
    assert caught.value.limit == 8
    with PytorchReader(path) as reader:
        assert reader.names() == [".".join(["inner"] * 12 + ["w"])]


@pytest.mark.parametrize(
    "code",
    [
        {"__torch__/other.py": ""},  # no code/__torch__.py for the root's class
        {"__torch__.py": "class Other(Module):\n"},
        {"__torch__.py": "class Net(Module):\n  __parameters__ = evil()\n"},
    ],
    ids=["missing-file", "missing-class", "unparsable-parameters"],
)
def test_sources_that_do_not_declare_the_module_are_refused(
    tmp_path: Path, code: dict[str, str]
) -> None:
    with pytest.raises(ArchiveError) as caught:
        PytorchReader(script_archive(tmp_path, op_module("Net"), code))
    assert caught.value.entry == "archive/code/__torch__.py"


def test_a_root_that_is_no_module_is_refused(tmp_path: Path) -> None:
    code = {"__torch__.py": "class Net(Module):\n"}
    with pytest.raises(ArchiveError) as caught:
        PytorchReader(script_archive(tmp_path, op_floats("0"), code))
    assert caught.value.entry == "archive/data.pkl"


def test_an_archive_of_the_model_json_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("old/model.json", "{}")
        archive.writestr("old/code/__torch__.py", "")
        archive.writestr("old/tensors/0", TWO_FLOATS)
    with pytest.raises(UnsupportedFormatError, match=r"model\.json layout"):
        PytorchReader(path)


SEED_CODE = "\n".join(
    [
        "class Net(Module):",
        '  __parameters__ = ["w", "0", ]',
        '  __buffers__ = ["b", ]',
        "  w : Tensor",
        '  __annotations__["0"] = Tensor',
        "  b : Tensor",
        "  child : __torch__.torch.nn.Child",
        "  def forward(self: __torch__.Net) -> Tensor:",
        "    return self.w",
    ]
)
SEED_CHILD_CODE = 'class Child(Module):\n  __parameters__ = ["v", ]\n  v : Tensor\n'
SEED_ROOT = pickle_of(
    op_module(
        "Net",
        ("w", op_floats("0")),
        ("0", op_floats("0")),
        ("b", op_floats("0")),
        ("child", op_module("Child", ("v", op_floats("0")), module="__torch__.torch.nn")),
    )
)


@settings(
    max_examples=60,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    entry=st.sampled_from(["data.pkl", "code/__torch__.py", "code/__torch__/torch/nn.py"]),
    mutations=st.lists(st.tuples(st.integers(0, 2**12), st.integers(0, 255)), max_size=6),
    cut=st.none() | st.integers(0, 2**12),
)
def test_mutated_entries_raise_only_our_errors(
    tmp_path: Path, entry: str, mutations: list[tuple[int, int]], cut: int | None
) -> None:
    entries = {
        "data.pkl": SEED_ROOT,
        "code/__torch__.py": SEED_CODE.encode(),
        "code/__torch__/torch/nn.py": SEED_CHILD_CODE.encode(),
    }
    data = bytearray(entries[entry])
    for position, byte in mutations:
        data[position % len(data)] = byte
    if cut is not None:
        del data[cut % len(data) :]
    entries[entry] = bytes(data)
    pickle = entries.pop("data.pkl")
    entries["constants.pkl"] = pickle_of(op_tuple())
    path = write_zip(
        tmp_path / f"mutant-{next(_COUNTER)}.pt", pickle, {"0": TWO_FLOATS}, extra=entries
    )
    if not mutations and cut is None:
        with PytorchReader(path) as reader:
            assert reader.names() == ["w", "0", "b", "child.v"]
    with contextlib.suppress(WeightstoreError):
        exercise(path)


# -- real archives, torch as the oracle ---------------------------------------------------------

torch = pytest.importorskip("torch")
nn = torch.nn


class Block(nn.Module):
    def __init__(self, channels_in: int, channels_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(channels_out)
        self.register_buffer("scale", torch.arange(channels_out, dtype=torch.float16))
        self.register_buffer("scratch", torch.ones(channels_out), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.conv(x)) * self.scale.float().view(1, -1, 1, 1)
        return y + self.scratch.view(1, -1, 1, 1)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(2, 4), Block(4, 4)])
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 3))
        self.tied = nn.Linear(8, 3, bias=False)
        self.tied.weight = self.head[3].weight  # one tensor under two names
        self.extra = nn.ParameterList([nn.Parameter(torch.randn(3, dtype=torch.float64))])
        self.embed = nn.Embedding(5, 3)
        self.register_buffer("steps", torch.tensor([7, 8], dtype=torch.int64))
        self.gate = nn.Parameter(torch.tensor(0.5, dtype=torch.bfloat16))
        self.plain = torch.ones(3)  # an unregistered tensor: in no state_dict

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        hidden = self.head[2](self.head[1](self.head[0](x)))
        out = self.head[3](hidden) + self.tied(hidden) + self.extra[0].float()
        return out + self.embed.weight[0] + self.gate.float() + self.plain + self.steps[0]


def trained_net() -> Net:
    """A Net whose BatchNorm statistics have moved off their defaults."""
    torch.manual_seed(0)
    net = Net()
    net.train()
    net(torch.randn(3, 2, 4, 4))
    return net.eval()


def jit_save(net: nn.Module, how: str, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "script":
            compiled = torch.jit.script(net)
        else:
            compiled = torch.jit.trace(net, torch.randn(1, 2, 4, 4))
        torch.jit.save(compiled, str(path))
    return path


@pytest.fixture(params=["script", "trace"])
def archive(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return jit_save(trained_net(), request.param, tmp_path / f"{request.param}.pt")


def test_names_dtypes_shapes_and_values_are_torch_jit_loads(archive: Path) -> None:
    expected = torch.jit.load(str(archive)).state_dict()
    assert "blocks.0.scratch" in expected  # a scripted module keeps non-persistent buffers
    assert "plain" not in expected and "tied.weight" in expected
    with PytorchReader.from_file(archive) as reader:
        assert reader.names() == list(expected)
        for name, tensor in expected.items():
            lazy = reader.tensor(name)
            assert lazy.shape == tuple(tensor.shape), name
            assert lazy.torch_dtype == str(tensor.dtype).removeprefix("torch."), name
            assert_same(reader.get(name), tensor, name)
        metadata = reader.metadata()
        assert metadata["format"] == "torchscript"
        assert metadata.tensor_count == len(expected)


def test_parameters_are_marked_and_buffers_are_not(archive: Path) -> None:
    parameters = dict(torch.jit.load(str(archive)).named_parameters(remove_duplicate=False))
    with PytorchReader(archive) as reader:
        marked = [name for name in reader if reader.tensor(name).is_parameter]
    assert sorted(marked) == sorted(parameters)


def test_a_top_level_key_selects_a_submodule(archive: Path) -> None:
    expected = torch.jit.load(str(archive)).blocks.state_dict()
    with PytorchReader(archive, top_level_key="blocks") as reader:
        assert reader.names() == list(expected)
        assert reader.load_object("gate") is not None  # the whole module's other entries
    with PytorchReader(archive, top_level_key="head") as reader:
        assert reader.names() == ["1.weight", "1.bias", "3.weight", "3.bias"]


def test_a_store_loads_an_archive_into_its_eager_twin(archive: Path) -> None:
    source = trained_net()
    twin = Net()
    result = load_from(twin, PytorchStore.from_file(archive))
    assert result.is_success()
    for name, tensor in source.state_dict().items():
        assert torch.equal(twin.state_dict()[name], tensor), name


def test_inspect_lists_an_archive(archive: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "weightstore", "inspect", str(archive)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "torchscript" in done.stdout
    assert "blocks.0.norm.running_mean" in done.stdout and "tied.weight" in done.stdout


def test_a_module_with_its_own_setstate_is_named_as_torch_names_it(tmp_path: Path) -> None:
    class Custom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

        @torch.jit.export
        def __getstate__(self) -> tuple[torch.Tensor, bool]:
            return (self.w, self.training)

        @torch.jit.export
        def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
            self.w = state[0]
            self.training = state[1]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.w

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.custom = Custom()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.custom(self.lin(x))

    path = jit_save(Outer(), "script", tmp_path / "custom.pt")
    with PytorchReader(path) as reader:
        assert reader.names() == list(torch.jit.load(str(path)).state_dict())
        assert reader.get("lin.weight").shape == (2, 2)
        with pytest.raises(UnsupportedObjectError):
            reader.get("custom.w")


with warnings.catch_warnings():  # at import, outside the marks that silence the tests
    warnings.simplefilter("ignore", DeprecationWarning)

    @torch.jit.interface
    class Step(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pass


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((2,), 3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


class Pipeline(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.step = Scaled()
        self.named = nn.ModuleDict({"lin": nn.Linear(2, 2)})
        self.pair = (torch.ones(2), 3)  # a tuple of a tensor and an int: in no state_dict

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.step(x) + self.pair[0]


# An interface-typed attribute holds a module too. Set as a type, not the string that postponed
# annotations make of it, which TorchScript cannot resolve for a class attribute.
Pipeline.__annotations__ = {"step": Step}


def test_interface_typed_and_dict_submodules_are_submodules(tmp_path: Path) -> None:
    path = jit_save(Pipeline(), "script", tmp_path / "pipeline.pt")
    expected = torch.jit.load(str(path)).state_dict()
    assert list(expected) == ["step.w", "named.lin.weight", "named.lin.bias"]
    with PytorchReader(path) as reader:
        assert reader.names() == list(expected)
        assert reader.get("step.w").tolist() == [3.0, 3.0]


def test_a_lite_interpreter_archive_reads_the_same(tmp_path: Path) -> None:
    path = tmp_path / "lite.ptl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(trained_net())._save_for_lite_interpreter(str(path))
    expected = torch.jit.load(str(path)).state_dict()
    with PytorchReader(path) as reader:
        assert reader.names() == list(expected)
        for name, tensor in expected.items():
            assert_same(reader.get(name), tensor, name)


def test_a_big_endian_archive_is_swapped(archive: Path, tmp_path: Path) -> None:
    # A big-endian writer also swaps every storage; here only the record changes, so each
    # multi-byte value must come back byte-swapped: proof that the record is honoured.
    def to_big(name: str, data: bytes) -> bytes | None:
        return b"big" if name.endswith("/byteorder") else data

    weight = torch.jit.load(str(archive)).state_dict()["head.1.weight"].numpy()
    with PytorchReader(rewrite_zip(archive, tmp_path / "big.pt", transform=to_big)) as reader:
        assert reader.metadata().byte_order == "big"
        assert reader.get("head.1.weight").tobytes() == weight.byteswap().tobytes()


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch.package's TypedStorage notice
def test_a_torch_package_stays_refused(tmp_path: Path) -> None:
    import torch.package.package_exporter as exporter_module

    path = tmp_path / "package.pt"
    gate = exporter_module._gate_torchscript_serialization
    exporter_module._gate_torchscript_serialization = False  # allow a scripted module inside
    try:
        with exporter_module.PackageExporter(str(path)) as exporter:
            exporter.extern("**")
            exporter.save_pickle("model", "model.pkl", nn.Linear(2, 2))
            exporter.save_pickle("model", "scripted.pkl", torch.jit.script(nn.Linear(2, 2)))
    finally:
        exporter_module._gate_torchscript_serialization = gate
    with pytest.raises(UnsupportedFormatError, match=r"torch\.package"):
        PytorchReader(path)


@pytest.mark.parametrize("how", ["script", "trace"])
def test_a_deep_transformer_reads_far_inside_the_code_limit(tmp_path: Path, how: str) -> None:
    # A traced module gets a class, and a code/ file, per submodule: 48 layers of 256 wide read
    # 179 KB of code (59 KB scripted). Here 12 narrow layers: the code grows with the layers,
    # not the width. The limit is for all code/*.py files read together (the .debug_pkl files
    # beside them are never read), so it must hold 100 of these.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    model = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        compiled = (
            torch.jit.script(model)
            if how == "script"
            else torch.jit.trace(model, torch.randn(1, 4, 16))
        )
        torch.jit.save(compiled, str(tmp_path / "deep.pt"))
    with zipfile.ZipFile(tmp_path / "deep.pt") as archive:
        code = sum(
            i.file_size for i in archive.infolist() if re.search(r"/code/.*\.py$", i.filename)
        )
    assert 100 * code < MAX_CODE_SIZE
    expected = torch.jit.load(str(tmp_path / "deep.pt")).state_dict()
    with PytorchReader(tmp_path / "deep.pt") as reader:
        assert reader.names() == list(expected)
