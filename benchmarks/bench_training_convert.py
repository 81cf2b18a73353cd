"""Peak memory of converting a training checkpoint into a served set, streaming, against the
size of the checkpoint.

A checkpoint is written by torch's own ``dcp.save`` (its default ``FileSystemWriter``), of
float32 tensors of `--tensor-mib` each, in a process of its own that exits before anything is
measured. Then, each in a fresh process, its peak resident size (``ru_maxrss`` of that child):

- ours: ``weightstore convert CKPT OUT_DIR --max-shard-size 5GB`` (a Hugging Face SafeTensors
  set, one tensor at a time);
- the peer (sizes up to `--peer-max-gb`, since it holds the whole model): torch's
  ``dcp_to_torch_save`` (what torch offers for leaving DCP), then ``torch.load`` and
  safetensors' ``save_file``, the path users take today.

The page cache is not dropped between runs (no root here), so times are warm; memory is what
this measures. Our goal: peak at most the largest tensor plus the largest chunk it is built
from plus 256 MiB, whatever the checkpoint's size. Printed per size: checkpoint GB, ours and
the peer's peak MiB, ours minus the bound's fixed part, and the ratio.

Each tensor is ``[rows, 1024]``; with ``--ranks N`` it is saved by N gloo processes, each
holding its ``Shard(0)`` rows, so the checkpoint holds N chunks per tensor. Run
``.venv/bin/python benchmarks/bench_training_convert.py --sizes-gb 1 4 13`` (``--quick``: small
sizes, seconds; ``--ranks 4``: the same from four ranks).

``--layout orbax`` writes the checkpoint with orbax-checkpoint's ``StandardCheckpointer``
(OCDBT, random values, since its zstd would shrink constant arrays to nothing); the peer
restores it with Orbax and saves with safetensors. ``--layout nemo`` writes a NeMo 1 ``.nemo``
tar (``model_config.yaml`` and a ``torch.save`` ``model_weights.ckpt``, NeMo's documented
layout; NeMo itself is too large to install here); the peer unpacks the weights, as NeMo's
restore does, and loads them with ``torch.load``.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

_MIB = 2**20

_WRITE = textwrap.dedent(
    """
    import os, socket, sys, torch, warnings
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    warnings.simplefilter("ignore")
    count, numel, path, ranks = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])

    def save(rank):  # each rank makes only its own rows of each tensor: Shard(0)
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(ranks))
        dist.init_process_group("gloo", rank=rank, world_size=ranks)
        mesh = init_device_mesh("cpu", (ranks,))
        rows = numel // 1024 // ranks
        state = {"model": {
            f"layers.{i}.weight": DTensor.from_local(
                torch.full((rows, 1024), float(i)), mesh, [Shard(0)])
            for i in range(count)}}
        dcp.save(state, checkpoint_id=path)
        dist.destroy_process_group()

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    mp.start_processes(save, nprocs=ranks, start_method="fork")  # a -c script: no spawn
    """
)
_WRITE_ORBAX = textwrap.dedent(
    """
    import sys, numpy as np, orbax.checkpoint as ocp
    count, numel, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    # The arrays live in a file-backed map, so a tree larger than memory can be saved.
    values = np.memmap(path + ".values", np.float32, "w+", shape=(count, numel // 1024, 1024))
    rng = np.random.default_rng(0)  # noise: zstd would shrink constant arrays to nothing
    for i in range(count):
        values[i] = rng.standard_normal((numel // 1024, 1024), dtype=np.float32)
    values.flush()
    tree = {"params": {f"layers_{i}": {"kernel": values[i]} for i in range(count)}}
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, tree)
    checkpointer.wait_until_finished()
    checkpointer.close()
    del tree, values
    import os
    os.unlink(path + ".values")
    """
)
_WRITE_NEMO = textwrap.dedent(
    """
    import io, os, sys, tarfile, torch
    count, numel, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    state = {f"model.layers.{i}.weight": torch.full((numel // 1024, 1024), float(i))
             for i in range(count)}
    weights = path + ".ckpt"
    torch.save(state, weights)
    del state
    config = b"target: nemo.collections.llm.gpt.model.GPTModel\\nnum_layers: 2\\n"
    with tarfile.open(path, "w:") as archive:  # NeMo 1's layout: an uncompressed tar
        entry = tarfile.TarInfo("./model_config.yaml")
        entry.size = len(config)
        archive.addfile(entry, io.BytesIO(config))
        archive.add(weights, "./model_weights.ckpt")
    os.unlink(weights)
    """
)
_PEER_ORBAX = textwrap.dedent(
    """
    import sys, jax, numpy as np, orbax.checkpoint as ocp
    from safetensors.numpy import save_file
    ckpt, out = sys.argv[1], sys.argv[3]
    tree = ocp.StandardCheckpointer().restore(ckpt)
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    save_file({".".join(k.key for k in keys): np.asarray(v) for keys, v in flat}, out)
    """
)
_PEER_NEMO = textwrap.dedent(
    """
    import sys, tarfile, torch
    from safetensors.torch import save_file
    ckpt, scratch, out = sys.argv[1:4]
    with tarfile.open(ckpt) as archive:  # what NeMo's own restore does first: unpack
        archive.extract("./model_weights.ckpt", scratch + ".d", filter="data")
    save_file(torch.load(scratch + ".d/model_weights.ckpt", weights_only=True), out)
    """
)
_PEER = textwrap.dedent(
    """
    import sys, torch, warnings
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from safetensors.torch import save_file
    warnings.simplefilter("ignore")
    ckpt, scratch, out = sys.argv[1:4]
    dcp_to_torch_save(ckpt, scratch)
    state = torch.load(scratch, weights_only=True)
    flat = {f"model.{k}": v for k, v in state["model"].items()}
    save_file(flat, out)
    """
)


def _peak_mib(command: list[str]) -> float:
    """Run `command`; its peak resident size in MiB (Linux reports ``ru_maxrss`` in KiB)."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{command[:4]} failed with {process.returncode}")
    return usage.ru_maxrss / 1024


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gb", type=float, nargs="+", default=[1.0, 4.0, 13.0])
    parser.add_argument("--tensor-mib", type=int, default=256)
    parser.add_argument("--peer-max-gb", type=float, default=4.0)
    parser.add_argument("--ranks", type=int, default=1, help="processes that save it (gloo)")
    parser.add_argument("--layout", choices=("dcp", "orbax", "nemo"), default="dcp")
    parser.add_argument("--quick", action="store_true", help="0.1 and 0.2 GB, 16 MiB tensors")
    args = parser.parse_args()
    if args.quick:
        args.sizes_gb, args.tensor_mib = [0.1, 0.2], 16
    root = Path(__file__).resolve().parent.parent
    compileall.compile_dir(str(root / "src"), quiet=1)  # time the library, not the compiler
    numel = args.tensor_mib * _MIB // 4
    bound = 2 * args.tensor_mib + 256
    write, peer_script = {
        "dcp": (_WRITE, _PEER), "orbax": (_WRITE_ORBAX, _PEER_ORBAX),
        "nemo": (_WRITE_NEMO, _PEER_NEMO),
    }[args.layout]  # fmt: skip
    saved_by = f"{args.ranks} rank(s)" if args.layout == "dcp" else "1 process"
    print(f"{args.layout}: tensors of {args.tensor_mib} MiB (float32), saved by {saved_by}; "
          f"bound = largest tensor + largest chunk + 256 MiB = {bound} MiB")  # fmt: skip
    print("ckpt_GB  ours_MiB  peer_MiB  ours/bound  ours/peer")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as scratch_dir:
        scratch = Path(scratch_dir)
        for size_gb in args.sizes_gb:
            count = max(1, round(size_gb * 1e9 / (numel * 4)))
            ckpt = scratch / ("ckpt.nemo" if args.layout == "nemo" else "ckpt")
            subprocess.run([sys.executable, "-c", write, str(count), str(numel), str(ckpt),
                            str(args.ranks)], check=True)  # fmt: skip
            written = _size(ckpt)
            out = scratch / "served"
            convert = ["convert", str(ckpt), str(out), "--max-shard-size", "5GB", "-q"]
            ours = _peak_mib([sys.executable, "-m", "weightstore", *convert])
            shutil.rmtree(out)
            peer = float("nan")
            if size_gb <= args.peer_max_gb:
                scratch_pt, peer_out = scratch / "t.pt", scratch / "peer.safetensors"
                peer = _peak_mib(
                    [sys.executable, "-c", peer_script, str(ckpt), str(scratch_pt), str(peer_out)]
                )
                for left in ("t.pt", "t.pt.d", "peer.safetensors"):
                    _remove(scratch / left)
            _remove(ckpt)
            print(f"{written / 1e9:7.2f} {ours:9.0f} {peer:9.0f} {ours / bound:11.2f} "
                  f"{ours / peer:10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
