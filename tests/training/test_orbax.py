"""Orbax checkpoints read without JAX, Flax or Orbax (`weightstore.training._orbax`): saved by
orbax-checkpoint itself (``StandardCheckpointer``, ``PyTreeCheckpointer``, a
``CheckpointManager`` step) from a Flax NNX model's state and from a plain tree of several
dtypes, with OCDBT on and off; every array against what was saved, bit for bit; a region read
through ``get_slice``; a fresh process that reads everything imports none of the three; and
hostile checkpoints (edited ``_METADATA`` and zarr metadata, missing and truncated data)
refused with typed errors naming the file and the leaf."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from weightstore.errors import (
    FileMissingError,
    LimitExceeded,
    SetError,
    SliceError,
    TensorNotFoundError,
    UnsupportedFormatError,
)

pytest.importorskip("tensorstore", reason="needs tensorstore, which reads Orbax's arrays")
ocp = pytest.importorskip("orbax.checkpoint", reason="needs orbax-checkpoint to save checkpoints")
jnp = pytest.importorskip("jax.numpy", reason="needs jax (pip install -e '.[jax]')")
ml_dtypes = pytest.importorskip("ml_dtypes")

from weightstore.training._orbax import OrbaxReader, is_orbax_checkpoint, open_orbax  # noqa: E402

BIG_CHUNK_BYTES = 4096  # the "big" leaf's chunks: 1,024 float32 each, 6 of them


def _plain_tree() -> dict[str, Any]:
    """A tree of several dtypes; arrays are built in NumPy so JAX compiles nothing."""
    rng = np.random.default_rng(7)
    return {
        "params": {
            "dense": {
                "kernel": jnp.asarray(rng.standard_normal((3, 5), dtype=np.float32)),
                "bias": jnp.asarray(rng.standard_normal(5).astype(ml_dtypes.bfloat16)),
            },
            "big": jnp.asarray(rng.standard_normal((48, 128), dtype=np.float32)),
        },
        "ids": [jnp.asarray(np.arange(-3, 4, dtype=np.int32)), np.arange(6, dtype=np.int64)],
        "scale": jnp.asarray(np.float32(0.5)),  # a 0-d array
        "step": 42,
        "lr": 0.125,
    }


def _nnx_model() -> Any:
    nnx = pytest.importorskip("flax.nnx", reason="needs flax (pip install -e '.[jax]')")

    class Mlp(nnx.Module):  # type: ignore[misc]
        def __init__(self, rngs: Any) -> None:
            self.fc = nnx.Linear(3, 8, rngs=rngs)
            self.norm = nnx.BatchNorm(8, rngs=rngs)
            self.layers = nnx.List([nnx.Linear(8, 8, rngs=rngs), nnx.Linear(8, 2, rngs=rngs)])
            self.drop = nnx.Dropout(0.1, rngs=rngs)

    return Mlp(nnx.Rngs(0))


def _save_standard(path: Path, tree: Any, use_ocdbt: bool) -> None:
    checkpointer = ocp.StandardCheckpointer(use_ocdbt=use_ocdbt)
    checkpointer.save(path.absolute(), tree)
    checkpointer.wait_until_finished()
    checkpointer.close()


def _save_pytree(path: Path, tree: Any, use_ocdbt: bool) -> None:
    """`PyTreeCheckpointer` with strings and empty leaves, and the big leaf in small chunks."""
    tree = dict(tree, name="cosine", nothing=None, empty={})
    import jax

    save_args = jax.tree_util.tree_map(lambda _: ocp.SaveArgs(), tree)
    save_args["params"]["big"] = ocp.SaveArgs(chunk_byte_size=BIG_CHUNK_BYTES)
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt)
    ocp.Checkpointer(handler).save(path.absolute(), args=ocp.args.PyTreeSave(tree, save_args))


def _host(tree: Any) -> dict[str, np.ndarray[Any, Any]]:
    """Every array leaf of `tree` by dotted key path, as NumPy holds it."""
    import jax

    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    found = {}
    for keys, value in flat:
        is_array = isinstance(value, jax.Array | np.ndarray)
        if is_array and not jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in keys]
            found[".".join(parts)] = np.asarray(value)
    return found


def _same_bits(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> bool:
    return (
        got.dtype == want.dtype
        and got.shape == want.shape
        and np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each producer's checkpoint of the plain tree, by ``<producer>-<ocdbt|zarr>``, and a
    CheckpointManager's root as ``manager``."""
    root = tmp_path_factory.mktemp("orbax")
    tree = _plain_tree()
    found = {}
    for use_ocdbt, storage in ((True, "ocdbt"), (False, "zarr")):
        for producer, save in (("standard", _save_standard), ("pytree", _save_pytree)):
            path = root / f"{producer}-{storage}"
            save(path, tree, use_ocdbt)
            found[path.name] = path
    manager = ocp.CheckpointManager((root / "manager").absolute())
    manager.save(3, args=ocp.args.StandardSave({"w": np.arange(4, dtype=np.float32)}))
    manager.wait_until_finished()
    manager.close()
    found["manager"] = root / "manager"
    return found


@pytest.fixture(scope="module")
def saved_nnx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An NNX model's state saved by ``StandardCheckpointer``, by ``ocdbt`` or ``zarr``."""
    model = _nnx_model()
    import flax.nnx as nnx

    _, state = nnx.split(model)  # the state `nnx.state` gives too
    root = tmp_path_factory.mktemp("orbax-nnx")
    for use_ocdbt, storage in ((True, "ocdbt"), (False, "zarr")):
        _save_standard(root / storage, state, use_ocdbt)
    return {"ocdbt": root / "ocdbt", "zarr": root / "zarr"}


PLAIN = ["standard-ocdbt", "standard-zarr", "pytree-ocdbt", "pytree-zarr"]
ARRAYS = ["ids.0", "ids.1", "params.big", "params.dense.bias", "params.dense.kernel", "scale"]


@pytest.mark.parametrize("which", PLAIN)
def test_plain_tree_reads_back_bit_for_bit(saved: dict[str, Path], which: str) -> None:
    want = _host(_plain_tree())
    assert is_orbax_checkpoint(str(saved[which]))
    with open_orbax(str(saved[which])) as reader:
        assert isinstance(reader, OrbaxReader) and reader.format is None
        assert reader.names() == ARRAYS == sorted(reader) and len(reader) == len(ARRAYS)
        assert reader.index.use_ocdbt == which.endswith("ocdbt")
        infos = {name: (dtype.name, shape) for name, dtype, shape, _ in reader.tensor_infos()}
        assert infos["params.dense.bias"] == ("BF16", (5,))
        assert infos["ids.0"] == ("I32", (7,)) and infos["scale"] == ("F32", ())
        for name in ARRAYS:
            got = reader.get(name)
            assert _same_bits(got, want[name]), name
            assert reader.descriptor(name).shape == got.shape
        values = reader.values()
        assert values.pop("step") == 42 and isinstance(reader.values()["step"], int)
        assert values.pop("lr") == 0.125
        if which.startswith("pytree"):
            assert values == {"name": "cosine", "nothing": None, "empty": {}}
        else:
            assert values == {}
        assert "step" not in reader and "params.big" in reader


@pytest.mark.parametrize("which", ["pytree-ocdbt", "pytree-zarr"])
def test_get_slice_reads_a_region_as_numpy_selects_it(saved: dict[str, Path], which: str) -> None:
    big = _host(_plain_tree())["params.big"]  # 48 x 128 float32 in chunks of 4 KiB
    with open_orbax(str(saved[which])) as reader:
        part = reader.get_slice("params.big")
        assert part.shape == (48, 128) and part.dtype.name == "F32" and len(part) == 48
        for key in [
            (slice(5, 17), slice(100, None)),
            (slice(None, None, -3), 7),
            (-1, slice(3, 90, 4)),
            (Ellipsis, slice(127, None, -5)),
            (slice(10, 3),),
            (slice(3, None, -1), slice(None, None, -1)),  # down to index 0
            (2, 5),
        ]:
            assert _same_bits(part[key], big[key]), key
        with pytest.raises(SliceError) as caught:
            part[48]
        assert caught.value.tensor == "params.big"


def test_a_slice_reads_only_its_chunks(saved: dict[str, Path]) -> None:
    """With reads capped between a chunk's size and the array's, the whole array is refused
    before anything is allocated and a region of a few chunks still reads."""
    big = _host(_plain_tree())["params.big"]
    reader = open_orbax(str(saved["pytree-ocdbt"]), max_read_bytes=4 * BIG_CHUNK_BYTES)
    reader.descriptor("params.big")
    assert reader._chunk_bytes["params.big"] <= BIG_CHUNK_BYTES  # orbax chose smaller chunks
    with pytest.raises(LimitExceeded) as caught:
        reader.get("params.big")
    assert caught.value.tensor == "params.big"
    assert _same_bits(reader.get_slice("params.big")[:8, :16], big[:8, :16])


@pytest.mark.parametrize("storage", ["ocdbt", "zarr"])
def test_nnx_state_names_match_the_jax_bridge(saved_nnx: dict[str, Path], storage: str) -> None:
    """An NNX State's leaves end in ``.value``; the reader drops it, so each Variable the
    bridge loads is named as the bridge names it, with its dtype and shape. The RNG state the
    bridge leaves out is read too (a load reports it unused)."""
    from flax import nnx

    from weightstore.bridge import bridge_for

    model = _nnx_model()
    want = _host(nnx.state(model))
    with open_orbax(str(saved_nnx[storage])) as reader:
        assert reader.index.nnx_state
        targets = {t.path: (t.dtype, t.shape) for t in bridge_for(model).targets()}
        assert {"fc.kernel", "norm.mean", "layers.1.bias"} <= targets.keys()
        for path, (dtype, shape) in targets.items():
            info = reader.descriptor(path)
            assert (info.dtype, info.shape) == (dtype, shape), path
            assert _same_bits(reader.get(path), want[f"{path}.value"]), path
        assert set(reader.names()) - targets.keys() == {"drop.rngs.count", "drop.rngs.key"}
        assert reader.index.arrays["fc.kernel"].param == "fc.kernel.value"


def test_a_checkpoint_manager_step_opens_its_one_item(saved: dict[str, Path]) -> None:
    step = saved["manager"] / "3"
    assert is_orbax_checkpoint(str(step)) and is_orbax_checkpoint(str(step / "default"))
    assert not is_orbax_checkpoint(str(saved["manager"]))
    for path in (step, step / "default", step / "default" / "_METADATA"):
        with open_orbax(str(path)) as reader:
            assert reader.path == str(step / "default")
            assert _same_bits(reader.get("w"), np.arange(4, dtype=np.float32))
    with pytest.raises(SetError, match="CheckpointManager's root") as caught:
        open_orbax(str(saved["manager"]))
    assert caught.value.path == str(saved["manager"])


@pytest.mark.parametrize("use_ocdbt", [True, False], ids=["ocdbt", "zarr"])
def test_zarr3_arrays_read_back(tmp_path: Path, use_ocdbt: bool) -> None:
    tree = {"w": np.arange(24, dtype=np.float32).reshape(4, 6), "n": np.arange(3, dtype=np.int8)}
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=True)
    ocp.Checkpointer(handler).save((tmp_path / "z3").absolute(), args=ocp.args.PyTreeSave(tree))
    with open_orbax(str(tmp_path / "z3")) as reader:
        assert reader.index.use_zarr3 and reader.index.use_ocdbt == use_ocdbt
        assert _same_bits(reader.get("w"), tree["w"]) and _same_bits(reader.get("n"), tree["n"])
        assert _same_bits(reader.get_slice("w")[1:3, ::-2], tree["w"][1:3, ::-2])


def test_detection_asks_names_only(tmp_path: Path) -> None:
    assert not is_orbax_checkpoint(str(tmp_path))
    (tmp_path / "_METADATA").write_text("{}")
    assert not is_orbax_checkpoint(str(tmp_path))  # no second Orbax marker: not taken
    (tmp_path / "manifest.ocdbt").write_bytes(b"")
    assert is_orbax_checkpoint(str(tmp_path))
    assert not is_orbax_checkpoint(str(tmp_path / "_METADATA"))
    assert not is_orbax_checkpoint(str(tmp_path / "absent"))


READER_SCRIPT = """
import sys
from weightstore.training._orbax import open_orbax
with open_orbax(sys.argv[1]) as reader:
    total = sum(int(reader.get(name).size) for name in reader.names())
    values = reader.values()
    part = reader.get_slice("params.big")[1:3]
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "flax", "orbax"))
print(total, len(values), part.shape, heavy)
"""


def test_reading_imports_no_jax_flax_or_orbax(saved: dict[str, Path]) -> None:
    for which in ("pytree-ocdbt", "pytree-zarr"):
        run = subprocess.run(
            [sys.executable, "-c", READER_SCRIPT, str(saved[which])],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        assert run.stdout.split() == ["6178", "5", "(2,", "128)", "[]"], run.stdout + run.stderr


def test_without_tensorstore_the_error_names_the_package(saved: dict[str, Path]) -> None:
    script = (
        "import sys; sys.modules['tensorstore'] = None\n"
        "from weightstore.training._orbax import open_orbax\n"
        "from weightstore.errors import UnsupportedFormatError\n"
        "try:\n    open_orbax(sys.argv[1])\n"
        "except UnsupportedFormatError as err:\n    print(err)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(saved["standard-ocdbt"])],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "pip install tensorstore" in run.stdout, run.stdout + run.stderr


# -- hostile checkpoints ----------------------------------------------------------------------


def _copy(saved: dict[str, Path], which: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved[which], tmp_path / which))


def _edit_json(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _entry(metadata: dict[str, Any], *keys: str) -> dict[str, Any]:
    entry: dict[str, Any] = metadata["tree_metadata"][str(keys)]
    return entry


def test_missing_or_malformed_metadata_is_refused(saved: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(saved, "standard-ocdbt", tmp_path)
    metadata = path / "_METADATA"
    text = metadata.read_text()
    metadata.write_text(text[: len(text) // 2])
    with pytest.raises(SetError, match="not valid JSON") as caught:
        open_orbax(str(path))
    assert caught.value.path == str(metadata)
    metadata.write_text(json.dumps({"tree_metadata": [1, 2]}))
    with pytest.raises(SetError, match="tree_metadata"):
        open_orbax(str(path))
    metadata.unlink()
    with pytest.raises(FileMissingError) as missing:
        open_orbax(str(path))
    assert missing.value.path == str(metadata)
    with pytest.raises(FileMissingError):
        open_orbax(str(tmp_path / "nowhere"))
    with pytest.raises(UnsupportedFormatError):
        open_orbax(str(path / "_CHECKPOINT_METADATA"))


@pytest.mark.parametrize(
    ("edit", "match", "tensor"),
    [
        (lambda m: _entry(m, "step")["value_metadata"].update(value_type="pickle"), "value type",
         "step"),
        (lambda m: _entry(m, "step")["key_metadata"][0].update(key_type=7), "no Orbax key", None),
        (lambda m: _entry(m, "params", "big")["value_metadata"].update(write_shape=[-1]),
         "write_shape", "params.big"),
        (lambda m: m["tree_metadata"].update({"('params.big',)": {
            "key_metadata": [{"key": "params.big", "key_type": 2}],
            "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False}}}),
         "two leaves", "params.big"),
        (lambda m: m.update(use_ocdbt="yes"), "use_ocdbt", None),
    ],
    ids=["unknown value type", "bad key type", "bad write shape", "name twice", "bad flag"],
)  # fmt: skip
def test_a_bad_tree_entry_is_refused(
    saved: dict[str, Path], tmp_path: Path, edit: Any, match: str, tensor: str | None
) -> None:
    path = _copy(saved, "standard-ocdbt", tmp_path)
    _edit_json(path / "_METADATA", edit)
    with pytest.raises(SetError, match=match) as caught:
        open_orbax(str(path))
    assert caught.value.path == str(path / "_METADATA") and caught.value.tensor == tensor


def test_a_missing_array_is_refused_naming_it(saved: dict[str, Path], tmp_path: Path) -> None:
    zarr = _copy(saved, "standard-zarr", tmp_path)
    shutil.rmtree(zarr / "params.dense.kernel")
    with pytest.raises(SetError, match="array folder") as caught:
        open_orbax(str(zarr))
    assert caught.value.tensor == "params.dense.kernel" and caught.value.path == str(zarr)

    ocdbt = _copy(saved, "standard-ocdbt", tmp_path)
    ghost = {
        "key_metadata": [{"key": "ghost", "key_type": 2}],
        "value_metadata": {"value_type": "jax.Array", "skip_deserialize": False},
    }
    _edit_json(ocdbt / "_METADATA", lambda m: m["tree_metadata"].update({"('ghost',)": ghost}))
    with open_orbax(str(ocdbt)) as reader:
        assert _same_bits(reader.get("scale"), np.asarray(np.float32(0.5)))
        with pytest.raises(SetError, match=r"cannot be opened.*does not exist") as caught:
            reader.get("ghost")
        assert caught.value.tensor == "ghost"
        with pytest.raises(TensorNotFoundError):
            reader.get("step")  # a value, not an array
    (ocdbt / "manifest.ocdbt").unlink()
    with pytest.raises(FileMissingError):
        open_orbax(str(ocdbt))


def test_a_parameter_name_leaving_the_directory_is_refused(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    path = _copy(saved, "standard-zarr", tmp_path)
    dots = {
        "key_metadata": [{"key": "..", "key_type": 2}],
        "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False},
    }
    _edit_json(path / "_METADATA", lambda m: m["tree_metadata"].update({"('..',)": dots}))
    with pytest.raises(SetError, match="no folder name") as caught:
        open_orbax(str(path))
    assert caught.value.tensor == ".."


def test_metadata_that_disagrees_with_the_array_is_refused(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    path = _copy(saved, "standard-zarr", tmp_path)
    _edit_json(
        path / "_METADATA",
        lambda m: _entry(m, "params", "dense", "kernel")["value_metadata"].update(
            write_shape=[3, 9]
        ),
    )
    _edit_json(path / "ids.0" / ".zarray", lambda z: z.update(dtype="<f8"))
    _edit_json(path / "params.big" / ".zarray", lambda z: z.update(shape=[48, 256]))
    _edit_json(path / "scale" / ".zarray", lambda z: z.update(dtype="|S4"))
    _edit_json(path / "step" / ".zarray", lambda z: z.update(shape=[2], chunks=[2]))
    with open_orbax(str(path)) as reader:
        with pytest.raises(SetError, match=r"is \[3, 5\], but _METADATA says \[3, 9\]") as caught:
            reader.descriptor("params.dense.kernel")
        assert caught.value.tensor == "params.dense.kernel"
        for name in ("ids.0", "params.big"):  # the chunk holds other bytes than claimed
            with pytest.raises(SetError, match="cannot be read") as caught:
                reader.get(name)
            assert caught.value.tensor == name and "local file" in caught.value.detail
        with pytest.raises(SetError, match="no tensor dtype"):
            reader.get("scale")
        with pytest.raises(SetError, match="scalar is stored as a \\[2\\] array"):
            reader.values()


@pytest.mark.parametrize("which", ["pytree-ocdbt", "pytree-zarr"])
def test_truncated_data_is_refused(saved: dict[str, Path], tmp_path: Path, which: str) -> None:
    path = _copy(saved, which, tmp_path)
    if which.endswith("zarr"):
        victims = [path / "params.big" / "0.0"]
    else:  # every data file of the database: the arrays' chunks are in one of them
        victims = [Path(d) / f for d, _, files in os.walk(path / "ocdbt.process_0") for f in files]
        victims = [v for v in victims if v.parent.name == "d"]
    for victim in victims:
        os.truncate(victim, victim.stat().st_size // 2)
    with open_orbax(str(path)) as reader:
        with pytest.raises(SetError) as caught:
            reader.get("params.big")
        assert caught.value.tensor == "params.big" and caught.value.path == str(path)


def test_a_huge_claimed_shape_is_refused_before_allocating(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    """tensorstore aborts the process when an allocation fails; the reader refuses first."""
    path = _copy(saved, "standard-zarr", tmp_path)
    _edit_json(path / "ids.1" / ".zarray", lambda z: z.update(shape=[2**42], chunks=[2**42]))
    _edit_json(path / "ids.0" / ".zarray", lambda z: z.update(shape=[2**62], chunks=[7]))
    with open_orbax(str(path)) as reader:
        with pytest.raises(LimitExceeded) as caught:
            reader.get("ids.1")
        assert caught.value.tensor == "ids.1" and caught.value.found == 8 * 2**42
        with pytest.raises(LimitExceeded):
            reader.get_slice("ids.1")[:4]  # its one chunk is the whole array
        with pytest.raises(LimitExceeded):
            reader.descriptor("ids.0")  # more bytes than NumPy can count


def test_open_reader_the_stores_and_the_cli_read_it(
    saved: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file

    from weightstore import Store, load_from, open_reader
    from weightstore.cli import main
    from weightstore.locate import Kind, locate

    directory = saved["standard-ocdbt"]
    assert locate(directory).kind is Kind.TRAINING
    with open_reader(directory) as reader:
        assert isinstance(reader, OrbaxReader)
        wanted = {name: reader.get(name) for name in reader.names()}
    model = {name: np.zeros_like(array) for name, array in wanted.items()}
    assert load_from(model, Store.from_file(directory)).is_success()
    assert all(_same_bits(model[name], array) for name, array in wanted.items())
    assert main(["inspect", str(directory)]) == 0
    assert "format:   orbax" in capsys.readouterr().out
    out = tmp_path / "orbax.safetensors"
    assert main(["convert", str(directory), str(out), "-q"]) == 0
    assert all(_same_bits(load_file(out)[n], a) for n, a in wanted.items())
