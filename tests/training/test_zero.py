"""DeepSpeed ZeRO checkpoints read without torch or DeepSpeed (weightstore.training._zero),
against DeepSpeed itself: its engine saves ZeRO-1, -2 and -3 checkpoints of a small model
(bf16 and fp32 training, a frozen layer, a buffer, a tied weight, two parameter groups) on 1 and
2 ranks of a gloo group, and its own ``get_fp32_state_dict_from_zero_checkpoint`` is the
oracle, tensor for tensor, bit for bit. Hostile checkpoints are real ones rewritten with
``torch.save``: a partition of the wrong size, a missing rank file, ``latest`` naming a missing
tag, a pickle naming code.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from tests._optional import need
from tests._ranks import run_ranks  # skips without torch.distributed
from weightstore.errors import CodeObjectError, InvalidOptionError, SetError, SliceError
from weightstore.io._source import PreadSource
from weightstore.pytorch_reader import FORMAT
from weightstore.training._zero import is_zero_checkpoint, open_zero

torch = need("torch")
need("deepspeed")

from tests.training import _zero_workers  # noqa: E402  (imports torch: after the skips)
from tests.training._zero_workers import (  # noqa: E402
    CASES,
    WIDE_SHAPE,
    WIDE_STAGES,
    case_name,
    wide_name,
)

CASE_IDS = [case_name(*case) for case in CASES]


@pytest.fixture(scope="module")
def zero_to_fp32() -> Any:
    """DeepSpeed's own reconstruction, imported with the CPU accelerator (the oracle)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DS_ACCELERATOR", "cpu")
        from deepspeed.utils import zero_to_fp32 as module

        return module


@pytest.fixture(scope="module", params=[1, 2], ids=lambda n: f"{n} ranks")
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every case of `CASES`, saved once per rank count, each in ``root/<case>``."""
    root = tmp_path_factory.mktemp(f"zero-{request.param}-ranks-")
    extensions = tmp_path_factory.getbasetemp() / "torch-extensions"  # shared by both groups
    run_ranks(_zero_workers.save_all, request.param, str(root), str(extensions))
    return root


def _expected(zero_to_fp32: Any, directory: Path) -> dict[str, Any]:
    state: dict[str, Any] = zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint(str(directory))
    return state


def _same(array: np.ndarray[Any, Any], tensor: Any) -> bool:
    """Bit for bit: dtype width, shape and raw bytes (NumPy holds bf16 as ml_dtypes')."""
    want = tensor.detach().contiguous()
    raw = want.view(torch.int16) if want.dtype == torch.bfloat16 else want
    expected = raw.numpy()
    return (
        array.dtype.itemsize == expected.dtype.itemsize
        and array.shape == expected.shape
        and np.array_equal(np.ascontiguousarray(array).view(np.uint8), expected.view(np.uint8))
    )


@pytest.mark.parametrize("case", CASE_IDS)
def test_fp32_weights_match_zero_to_fp32_bit_for_bit(
    saved: Path, case: str, zero_to_fp32: Any
) -> None:
    expected = _expected(zero_to_fp32, saved / case)
    with open_zero(str(saved / case)) as reader:
        assert reader.format is FORMAT
        assert reader.names_in_file_order() == list(expected)  # buffers, frozen, trainable, tied
        assert reader.names() == sorted(expected)
        for name, tensor in expected.items():
            assert _same(reader.get(name), tensor), name
            info = reader.descriptor(name)
            assert (info.dtype.numpy, info.shape) == (reader.get(name).dtype, tuple(tensor.shape))
        stage = case[len("stage")]
        assert reader.metadata() == {
            "zero_stage": stage, "world_size": str(_ranks(saved)), "tag": "global_step1",
            "weights": "fp32", "ds_version": version("deepspeed"),
        }  # fmt: skip
        assert reader.values()["global_steps"] == 1
        assert [row[0] for row in reader.tensor_infos()] == list(expected)
        frozen = {"frozen.weight", "frozen.bias"} if stage != "1" else set()  # stage 1 saves none
        assert set(reader) == {"scale", "embed.weight", "hidden.weight", "hidden.bias"} | frozen | {
            "head.weight"  # the tied alias of embed.weight
        }
        assert len(reader) == len(expected)
        assert list(reader) == sorted(expected)


def _ranks(saved: Path) -> int:
    return 1 if saved.name.startswith("zero-1-") else 2


@pytest.mark.parametrize("case", ["stage2-bf16", "stage3-bf16"])
def test_slices_read_the_rows_asked_for(saved: Path, case: str) -> None:
    with open_zero(str(saved / case)) as reader:
        for name in reader.names():
            whole = reader.get(name)
            part = reader.get_slice(name)
            assert part.shape == whole.shape and part.dtype == whole.dtype
            for key in (np.s_[1:4], np.s_[::-3], np.s_[2], np.s_[..., 1:], np.s_[5:2]):
                assert np.array_equal(part[key], whole[key]), (name, key)
        with pytest.raises(SliceError):
            reader.get_slice("embed.weight")[99]


def test_pread_gives_copies_of_the_same_values(saved: Path) -> None:
    directory = str(saved / "stage3-bf16")
    with open_zero(directory) as mapped, open_zero(directory, mode="pread") as copied:
        for name in mapped.names():
            first, second = mapped.get(name), copied.get(name)
            assert not np.shares_memory(first, second), name
            assert np.array_equal(first.view(np.uint8), second.view(np.uint8)), name


@pytest.mark.parametrize("case", ["stage1-bf16", "stage2-bf16", "stage2-fp32"])
def test_model_states_are_the_module_as_saved(saved: Path, case: str) -> None:
    file = saved / case / "global_step1" / "mp_rank_00_model_states.pt"
    module = torch.load(file, map_location="cpu", weights_only=False)["module"]
    with open_zero(str(saved / case), weights="model-states") as reader:
        assert reader.names_in_file_order() == list(module)
        for name, tensor in module.items():
            assert _same(reader.get(name), tensor), name
        if case.endswith("bf16"):
            assert reader.descriptor("hidden.weight").dtype.name == "BF16"
        assert reader.metadata()["weights"] == "model-states"


def test_model_states_of_stage_3_are_refused(saved: Path) -> None:
    with pytest.raises(InvalidOptionError, match="placeholders"):
        open_zero(str(saved / "stage3-bf16"), weights="model-states")


def test_a_checkpoint_is_told_by_its_names(saved: Path, tmp_path: Path) -> None:
    assert is_zero_checkpoint(str(saved / "stage1-bf16"))
    assert is_zero_checkpoint(str(saved / "stage3-bf16" / "global_step1"))
    assert not is_zero_checkpoint(str(saved))  # no `latest`: a folder of checkpoints
    assert not is_zero_checkpoint(str(saved / "stage1-bf16" / "latest"))  # a file
    (tmp_path / "latest").write_text("global_step1")
    (tmp_path / "global_step1").mkdir()
    assert not is_zero_checkpoint(str(tmp_path))  # no rank files
    assert not is_zero_checkpoint(str(tmp_path / "absent"))


def test_reading_one_imports_no_torch(saved: Path) -> None:
    code = (
        "import sys\nfrom weightstore.training._zero import open_zero\n"
        f"r = open_zero({str(saved / 'stage3-bf16')!r})\n"
        "total = sum(int(r.get(n).size) for n in r.names())\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert 'deepspeed' not in sys.modules, 'deepspeed was imported'\nprint(total)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(done.stdout) == 11 * 7 * 2 + 13 * 7 + 13 + 5 * 13 + 5 + 5  # the tie counted twice


# -- hostile checkpoints -------------------------------------------------------------------------


def _copy(saved: Path, case: str, tmp_path: Path) -> Path:
    target = tmp_path / case
    shutil.copytree(saved / case, target)
    return target


def _rewrite(file: Path, change: Any) -> None:
    """Load a real rank file (the test trusts it: DeepSpeed wrote it), change it, save it."""
    state = torch.load(file, map_location="cpu", weights_only=False)
    change(state)
    torch.save(state, file)


def _last_optim_file(directory: Path) -> Path:
    return sorted((directory / "global_step1").glob("*_optim_states.pt"))[-1]


def test_a_partition_shorter_than_the_shapes_say_is_refused(
    saved: Path, tmp_path: Path, zero_to_fp32: Any
) -> None:
    directory = _copy(saved, "stage2-bf16", tmp_path)
    file = _last_optim_file(directory)

    def shorten(state: dict[str, Any]) -> None:
        groups = state["optimizer_state_dict"]["single_partition_of_fp32_groups"]
        groups[1] = groups[1][:-2].clone()

    _rewrite(file, shorten)
    with pytest.raises(SetError) as raised:
        open_zero(str(directory))
    assert raised.value.tensor == "hidden.bias" and raised.value.shard == file.name
    assert "parameter group 1" in str(raised.value)
    with pytest.raises(RuntimeError, match="exceeds dimension size"):  # DeepSpeed: untyped
        _expected(zero_to_fp32, directory)


def test_a_stage_3_share_of_another_size_is_refused(
    saved: Path, tmp_path: Path, zero_to_fp32: Any
) -> None:
    directory = _copy(saved, "stage3-bf16", tmp_path)
    file = _last_optim_file(directory)

    def grow(state: dict[str, Any]) -> None:
        groups = state["optimizer_state_dict"]["fp32_flat_groups"]
        groups[0] = torch.cat([groups[0], torch.zeros(3)])

    _rewrite(file, grow)
    with pytest.raises(SetError) as raised:
        open_zero(str(directory))
    assert raised.value.shard == file.name
    if _ranks(saved) == 1:
        assert "take 181 elements" in str(raised.value)
    else:
        assert "every rank holds an equal share" in str(raised.value)


def test_a_shape_claiming_more_than_the_partitions_hold_is_refused(
    saved: Path, tmp_path: Path
) -> None:
    directory = _copy(saved, "stage3-bf16", tmp_path)
    for file in (directory / "global_step1").glob("*model_states.pt"):
        _rewrite(file, lambda s: s["param_shapes"][1].update({"hidden.bias": torch.Size([10**12])}))
    with pytest.raises(SetError) as raised:
        open_zero(str(directory))
    assert raised.value.tensor == "hidden.bias"
    assert "each rank's flat groups" in str(raised.value)


def test_a_missing_rank_file_is_refused(saved: Path, tmp_path: Path) -> None:
    if _ranks(saved) == 1:
        pytest.skip("a missing rank of one is a folder with no optimizer states")
    directory = _copy(saved, "stage1-bf16", tmp_path)
    missing = sorted((directory / "global_step1").glob("*_optim_states.pt"))[0]
    missing.unlink()  # rank 0's: rank 1's file still says two ranks
    with pytest.raises(SetError) as raised:
        open_zero(str(directory))
    assert raised.value.shard == missing.name and "is missing" in str(raised.value)


def test_a_missing_stage_3_model_states_file_is_refused(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, "stage3-bf16", tmp_path)
    missing = sorted((directory / "global_step1").glob("*_model_states.pt"))[-1]
    missing.unlink()
    with pytest.raises(SetError) as raised:
        open_zero(str(directory))
    assert raised.value.shard == missing.name


def test_latest_naming_a_missing_tag_is_refused(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, "stage2-fp32", tmp_path)
    (directory / "latest").write_text("global_step9\n")
    assert is_zero_checkpoint(str(directory))  # names only: the open says what is wrong
    with pytest.raises(SetError, match=r"global_step9.*no such folder") as raised:
        open_zero(str(directory))
    assert raised.value.path == str(directory / "latest")
    (directory / "latest").write_text("../elsewhere")
    with pytest.raises(SetError, match="not a folder name"):
        open_zero(str(directory))


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (__import__("os").system, ("echo pwned",))


def test_a_rank_file_naming_code_is_refused_and_runs_nothing(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, "stage2-bf16", tmp_path)
    _rewrite(_last_optim_file(directory), lambda s: s.update(ds_config={"hook": _Evil()}))
    with pytest.raises(CodeObjectError, match="system"):
        open_zero(str(directory))


def test_bad_options_are_refused(saved: Path) -> None:
    with pytest.raises(InvalidOptionError, match="weights"):
        open_zero(str(saved / "stage1-bf16"), weights="fp16")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="mode"):
        open_zero(str(saved / "stage1-bf16"), mode="read")  # type: ignore[arg-type]


def test_open_reader_the_stores_and_the_cli_read_it(
    saved: Path, zero_to_fp32: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file

    from weightstore import PytorchStore, Store, open_reader
    from weightstore.cli import main
    from weightstore.locate import Kind, locate
    from weightstore.training._zero import ZeroReader

    directory = saved / case_name(3, "bf16")
    expected = _expected(zero_to_fp32, directory)
    assert locate(directory).kind is Kind.TRAINING
    with open_reader(directory) as reader:
        assert isinstance(reader, ZeroReader)
    store = Store.from_file(directory)
    assert isinstance(store, PytorchStore) and sorted(store.keys()) == sorted(expected)
    assert main(["inspect", str(directory)]) == 0
    assert "format:   zero" in capsys.readouterr().out
    out = tmp_path / "fp32.safetensors"
    assert main(["convert", str(directory), str(out), "-q"]) == 0
    converted = load_file(out)
    assert sorted(converted) == sorted(expected)
    assert all(_same(converted[name], tensor) for name, tensor in expected.items())


class _CountingPread(PreadSource):
    """The pread source of the archives' storages, adding up the bytes each read returns
    (zipfile reads each file's directory and pickle by its path: a few KB per file)."""

    read_bytes: ClassVar[int] = 0

    def read(self, offset: int, size: int, what: str, tensor: str | None = None) -> memoryview:
        _CountingPread.read_bytes += size
        return super().read(offset, size, what, tensor)


@pytest.mark.parametrize("stage", WIDE_STAGES, ids=lambda stage: f"stage{stage}")
def test_a_rank_of_another_world_size_reads_only_its_share(
    saved: Path, stage: int, zero_to_fp32: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from weightstore import Store
    from weightstore.distributed import chunk_bounds, load
    from weightstore.pytorch_reader import _archive

    if _ranks(saved) != 2:
        pytest.skip("the wide checkpoints are saved by 2 ranks only")
    directory = saved / wide_name(stage)
    full = {name: t.detach().numpy() for name, t in _expected(zero_to_fp32, directory).items()}
    monkeypatch.setattr(_archive, "PreadSource", _CountingPread)
    rows, cols = WIDE_SHAPE
    for world_size in (1, 3, 4):  # 3: slices cut the ranks' flat partitions unevenly
        for rank in range(world_size):
            _CountingPread.read_bytes = 0
            mine = [chunk_bounds(size, rank, world_size) for size in (rows, cols)]
            model = {
                "rows": np.zeros((mine[0][1] - mine[0][0], cols), np.float32),
                "cols": np.zeros((rows, mine[1][1] - mine[1][0]), np.float32),
            }
            plan = {"^rows$": 0, "^cols$": 1}
            store = Store.from_file(directory).with_io("pread")  # copies: every byte counted
            result = load(store, model, plan, rank=rank, world_size=world_size)
            assert result.is_success(), result
            assert np.array_equal(model["rows"], full["rows"][slice(*mine[0])])
            assert np.array_equal(model["cols"], full["cols"][:, slice(*mine[1])])
            share = model["rows"].nbytes + model["cols"].nbytes
            read = _CountingPread.read_bytes
            assert share <= read <= 1.1 * share, (world_size, rank, read, share)
            print(f"stage {stage}, rank {rank} of {world_size} (saved by 2): read {read:,} "
                  f"bytes for a share of {share:,} ({read / share:.4f}x)")  # fmt: skip


def test_the_model_states_weights_load_and_convert_when_asked(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file

    from weightstore import PytorchStore, SafetensorsStore, save_into
    from weightstore.cli import main

    directory = saved / case_name(2, "bf16")
    file = directory / "global_step1" / "mp_rank_00_model_states.pt"
    module = torch.load(file, map_location="cpu", weights_only=False)["module"]
    store = PytorchStore.from_file(directory).with_weights_from("model-states")
    assert sorted(store.keys()) == sorted(module)
    assert store.reader().metadata()["weights"] == "model-states"
    out = tmp_path / "bf16.safetensors"
    assert main(["convert", str(directory), str(out), "--from", "model-states", "-q"]) == 0
    converted = load_file(out)
    assert sorted(converted) == sorted(module)
    assert all(_same(converted[name], tensor) for name, tensor in module.items())
    assert converted["hidden.weight"].dtype.itemsize == 2  # bf16 as trained, not fp32
    with pytest.raises(InvalidOptionError, match="model-states"):
        PytorchStore.from_file(directory).with_weights_from("fp16")
    other = tmp_path / "plain.safetensors"
    save_into({"w": np.zeros(3, np.float32)}, SafetensorsStore.from_file(other))
    assert main(["convert", str(other), str(tmp_path / "x.safetensors"), "--from", "fp32"]) != 0
    assert "--from applies to a DeepSpeed ZeRO checkpoint" in capsys.readouterr().err
    pt = tmp_path / "plain.pt"
    torch.save({"w": torch.zeros(3)}, pt)
    with pytest.raises(InvalidOptionError, match="applies to a DeepSpeed ZeRO checkpoint"):
        PytorchStore.from_file(pt).with_weights_from("model-states").keys()
