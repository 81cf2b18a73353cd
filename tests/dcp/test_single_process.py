"""torch.distributed.checkpoint through weightstore's storage in one process (``no_dist``):
what a save writes and replaces, what it refuses, what a load refuses to run, the SafeTensors
pair, and a save holding one chunk at a time. DCP and torch are the oracles."""

from __future__ import annotations

import base64
import io
import json
import os
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from torch.distributed.checkpoint import CheckpointException  # noqa: E402
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner  # noqa: E402

from weightstore.dcp import (  # noqa: E402
    DCP_INDEX_NAME,
    BurnpackStorageReader,
    BurnpackStorageWriter,
    SafetensorsStorageReader,
    SafetensorsStorageWriter,
    open_dcp,
)
from weightstore.errors import (  # noqa: E402
    DestinationExistsError,
    DTypeError,
    InvalidOptionError,
    SetError,
)


@pytest.fixture(autouse=True)
def _one_process() -> Iterator[None]:
    with warnings.catch_warnings():  # DCP: "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        yield


def model_state(seed: int = 0) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "model": {
            "fc": {"weight": torch.randn(6, 4, generator=generator), "bias": torch.zeros(6)},
            "count": torch.tensor(seed),
        },
        "epoch": seed,
        "opts": {"lr": 1e-3, "betas": (0.9, 0.95), "tags": ["a", "b"], "none": None},
    }


def blank() -> dict[str, Any]:
    return {
        "model": {
            "fc": {"weight": torch.zeros(6, 4), "bias": torch.ones(6)},
            "count": torch.tensor(-1),
        },
        "epoch": -1,
        "opts": {"lr": 0.0, "betas": None, "tags": None, "none": 1},
    }


def save(state: dict[str, Any], directory: Path, **options: Any) -> None:
    dcp.save(state, storage_writer=BurnpackStorageWriter(directory, **options), no_dist=True)


def load(directory: Path, **options: Any) -> dict[str, Any]:
    target = blank()
    dcp.load(target, storage_reader=BurnpackStorageReader(directory, **options), no_dist=True)
    return target


def failure(caught: pytest.ExceptionInfo[CheckpointException]) -> BaseException:
    """The error DCP wrapped (the only rank's)."""
    (error, _), *_ = caught.value.failures.values()
    return error


def assert_loads_as(directory: Path, seed: int) -> None:
    loaded, expected = load(directory), model_state(seed)
    assert torch.equal(loaded["model"]["fc"]["weight"], expected["model"]["fc"]["weight"])
    assert torch.equal(loaded["model"]["count"], expected["model"]["count"])
    assert loaded["epoch"] == seed and loaded["opts"] == expected["opts"]
    assert type(loaded["opts"]["betas"]) is tuple


def test_a_save_loads_back_bit_exactly(tmp_path: Path) -> None:
    save(model_state(1), tmp_path / "ckpt")
    assert_loads_as(tmp_path / "ckpt", 1)
    names = sorted(os.listdir(tmp_path / "ckpt"))
    assert names[0] == DCP_INDEX_NAME and len(names) == 2 and names[1].startswith("rank-00000.")


def test_a_committed_checkpoint_is_kept_unless_overwriting(tmp_path: Path) -> None:
    save(model_state(1), tmp_path / "ckpt")
    before = sorted(os.listdir(tmp_path / "ckpt"))
    with pytest.raises(CheckpointException) as caught:
        save(model_state(2), tmp_path / "ckpt")
    assert isinstance(failure(caught), DestinationExistsError)
    assert sorted(os.listdir(tmp_path / "ckpt")) == before
    assert_loads_as(tmp_path / "ckpt", 1)


def test_an_overwrite_writes_new_names_and_removes_the_old_files(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    save(model_state(1), directory)
    (old_file,) = [name for name in os.listdir(directory) if name.startswith("rank-")]
    stray = directory / "rank-00003.0badf00d.bpk"  # a killed save's file, never committed
    stray.write_bytes(b"left over")
    scratch = directory / f"{DCP_INDEX_NAME}.999999999-0.tmp"  # a dead writer's scratch file
    scratch.write_bytes(b"{")
    save(model_state(2), directory, overwrite=True)
    names = sorted(os.listdir(directory))
    assert old_file not in names and len(names) == 2, names
    assert not stray.exists() and not scratch.exists()
    assert_loads_as(directory, 2)


def test_a_value_that_is_no_plain_value_is_refused_before_writing(tmp_path: Path) -> None:
    state = model_state(1)
    state["opts"]["seen"] = ({1, 2},)  # a tuple is a leaf: DCP saves it as torch.save bytes
    with pytest.raises(CheckpointException) as caught:
        save(state, tmp_path / "ckpt")
    error = failure(caught)
    assert isinstance(error, SetError) and error.tensor == "opts.seen"
    assert "of type set" in str(error)
    assert not [name for name in os.listdir(tmp_path / "ckpt") if name != "."]


def test_opaque_values_need_the_opt_in_on_both_sides(tmp_path: Path) -> None:
    state = model_state(1)
    state["opts"]["seen"] = ({1, 2},)
    save(state, tmp_path / "ckpt", allow_opaque_values=True)
    stored = json.loads((tmp_path / "ckpt" / DCP_INDEX_NAME).read_text())["values"]["opts.seen"]
    assert list(stored) == ["$opaque"]
    target = blank()
    target["opts"]["seen"] = None
    with pytest.raises(CheckpointException) as caught:
        dcp.load(target, storage_reader=BurnpackStorageReader(tmp_path / "ckpt"), no_dist=True)
    error = failure(caught)
    assert isinstance(error, SetError) and error.tensor == "opts.seen"
    assert "allow_opaque_values=True" in str(error)
    reader = BurnpackStorageReader(tmp_path / "ckpt", allow_opaque_values=True)
    dcp.load(target, storage_reader=reader, no_dist=True)
    assert target["opts"]["seen"] == ({1, 2},)


class Marker:
    """Unpickling it creates a file: proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def _with_stored_value(directory: Path, form: object) -> None:
    """Replace the stored value of ``epoch`` in the committed index by `form`."""
    index_path = directory / DCP_INDEX_NAME
    index = json.loads(index_path.read_text())
    index["values"]["epoch"] = form
    index_path.write_text(json.dumps(index))


def test_a_stored_pickle_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = io.BytesIO()
    torch.save(Marker(str(marker)), payload)
    encoded = base64.b64encode(payload.getvalue()).decode()
    save(model_state(1), tmp_path / "ckpt")
    _with_stored_value(tmp_path / "ckpt", {"$opaque": encoded})
    with pytest.raises(CheckpointException) as caught:
        load(tmp_path / "ckpt")
    assert isinstance(failure(caught), SetError) and not marker.exists()
    _with_stored_value(tmp_path / "ckpt", {"$bytes": encoded})  # bytes stay bytes
    assert load(tmp_path / "ckpt")["epoch"] == payload.getvalue() and not marker.exists()
    with open_dcp(str(tmp_path / "ckpt")) as reader:  # without torch.distributed as well
        assert reader.values()["epoch"] == payload.getvalue()
    assert not marker.exists()


def test_a_hostile_index_is_refused_when_its_metadata_is_read(tmp_path: Path) -> None:
    save(model_state(1), tmp_path / "ckpt")
    index_path = tmp_path / "ckpt" / DCP_INDEX_NAME
    index = json.loads(index_path.read_text())
    index["tensors"]["model.fc.weight"]["chunks"][0]["file"] = "../../etc/passwd"
    index_path.write_text(json.dumps(index))
    with pytest.raises(SetError, match="leaves the directory") as caught:
        BurnpackStorageReader(tmp_path / "ckpt").read_metadata()
    assert caught.value.tensor == "model.fc.weight"


def test_the_safetensors_pair_holds_what_burnpack_cannot(tmp_path: Path) -> None:
    state = {
        "fp8": torch.arange(8, dtype=torch.float32).to(torch.float8_e4m3fn),
        "complex": torch.randn(3, dtype=torch.complex64),
    }
    with pytest.raises(CheckpointException) as caught:
        save(state, tmp_path / "bpk")
    error = failure(caught)
    assert isinstance(error, DTypeError) and error.tensor in state
    assert "SafetensorsStorageWriter" in str(error)
    assert not [n for n in os.listdir(tmp_path / "bpk") if n.startswith(("rank-", "dcp."))]
    dcp.save(state, storage_writer=SafetensorsStorageWriter(tmp_path / "st"), no_dist=True)
    assert [n.endswith(".safetensors") for n in os.listdir(tmp_path / "st") if "rank" in n] == [
        True
    ]
    target = {name: torch.zeros_like(tensor) for name, tensor in state.items()}
    reader = SafetensorsStorageReader(tmp_path / "st")
    dcp.load(target, storage_reader=reader, no_dist=True)
    for name, tensor in state.items():
        assert torch.equal(target[name].view(torch.uint8), tensor.view(torch.uint8)), name


class TrackingPlanner(DefaultSavePlanner):
    """Hands the writer a fresh copy of each chunk and counts how many copies are alive."""

    def __init__(self) -> None:
        super().__init__()
        self.alive: list[weakref.ref[Any]] = []
        self.most_alive = 0

    def resolve_data(self, write_item: Any) -> Any:
        data = super().resolve_data(write_item)
        if not isinstance(data, torch.Tensor):
            return data
        self.alive = [ref for ref in self.alive if ref() is not None]
        self.most_alive = max(self.most_alive, len(self.alive))
        copy = data.clone()
        self.alive.append(weakref.ref(copy))
        return copy


def test_a_save_holds_one_chunk_at_a_time(tmp_path: Path) -> None:
    state = {f"layer{i}": torch.full((256, 256), float(i)) for i in range(8)}
    planner = TrackingPlanner()
    writer = BurnpackStorageWriter(tmp_path / "ckpt")
    dcp.save(state, storage_writer=writer, planner=planner, no_dist=True)
    assert planner.most_alive == 0  # each chunk is gone before the next is asked for
    with open_dcp(str(tmp_path / "ckpt")) as reader:
        assert float(reader.get("layer7")[0, 0]) == 7.0


def test_per_rank_metadata_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError) as caught:  # DCP runs this step unwrapped
        dcp.save(
            model_state(),
            storage_writer=BurnpackStorageWriter(tmp_path / "ckpt"),
            no_dist=True,
            use_collectives=False,
        )
    assert caught.value.option == "use_collectives"


class CachingPlanner(DefaultSavePlanner):
    """A planner reusing its last plan: its own class, so its cache (kept on the class by
    name) is this test's alone."""

    def __init__(self) -> None:
        super().__init__(enable_plan_caching=True)


def test_cached_plans_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    planner = CachingPlanner()
    dcp.save(
        model_state(1),
        storage_writer=BurnpackStorageWriter(tmp_path / "a"),
        planner=planner,
        no_dist=True,
    )
    with pytest.raises(CheckpointException) as caught:  # the same plan again: from the cache
        writer = BurnpackStorageWriter(tmp_path / "b")
        dcp.save(model_state(1), storage_writer=writer, planner=CachingPlanner(), no_dist=True)
    error = failure(caught)
    assert isinstance(error, InvalidOptionError) and error.option == "enable_plan_caching"
    assert os.listdir(tmp_path / "b") == []
    assert_loads_as(tmp_path / "a", 1)


def test_checkpoint_id_names_the_directory(tmp_path: Path) -> None:
    writer = BurnpackStorageWriter(tmp_path / "elsewhere")
    dcp.save(model_state(3), checkpoint_id=tmp_path / "ckpt", storage_writer=writer, no_dist=True)
    assert (tmp_path / "ckpt" / DCP_INDEX_NAME).is_file()
    assert writer.storage_meta() is not None and writer.checkpoint_id == str(tmp_path / "ckpt")
    assert BurnpackStorageReader.validate_checkpoint_id(tmp_path / "ckpt")
    assert not BurnpackStorageReader.validate_checkpoint_id(tmp_path / "elsewhere")
    assert not BurnpackStorageWriter.validate_checkpoint_id("s3://bucket/ckpt")
    assert_loads_as(tmp_path / "ckpt", 3)
