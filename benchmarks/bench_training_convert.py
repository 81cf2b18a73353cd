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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gb", type=float, nargs="+", default=[1.0, 4.0, 13.0])
    parser.add_argument("--tensor-mib", type=int, default=256)
    parser.add_argument("--peer-max-gb", type=float, default=4.0)
    parser.add_argument("--ranks", type=int, default=1, help="processes that save it (gloo)")
    parser.add_argument("--quick", action="store_true", help="0.1 and 0.2 GB, 16 MiB tensors")
    args = parser.parse_args()
    if args.quick:
        args.sizes_gb, args.tensor_mib = [0.1, 0.2], 16
    root = Path(__file__).resolve().parent.parent
    compileall.compile_dir(str(root / "src"), quiet=1)  # time the library, not the compiler
    numel = args.tensor_mib * _MIB // 4
    bound = 2 * args.tensor_mib + 256
    print(f"tensors of {args.tensor_mib} MiB (float32), saved by {args.ranks} rank(s); bound = "
          f"largest tensor + largest chunk + 256 MiB = {bound} MiB")  # fmt: skip
    print("ckpt_GB  ours_MiB  peer_MiB  ours/bound  ours/peer")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as scratch_dir:
        scratch = Path(scratch_dir)
        for size_gb in args.sizes_gb:
            count = max(1, round(size_gb * 1e9 / (numel * 4)))
            ckpt = scratch / "ckpt"
            subprocess.run([sys.executable, "-c", _WRITE, str(count), str(numel), str(ckpt),
                            str(args.ranks)], check=True)  # fmt: skip
            written = sum(f.stat().st_size for f in ckpt.iterdir())
            out = scratch / "served"
            convert = ["convert", str(ckpt), str(out), "--max-shard-size", "5GB", "-q"]
            ours = _peak_mib([sys.executable, "-m", "weightstore", *convert])
            shutil.rmtree(out)
            peer = float("nan")
            if size_gb <= args.peer_max_gb:
                peer = _peak_mib([sys.executable, "-c", _PEER, str(ckpt), str(scratch / "t.pt"),
                                  str(scratch / "peer.safetensors")])  # fmt: skip
                (scratch / "t.pt").unlink()
                (scratch / "peer.safetensors").unlink()
            shutil.rmtree(ckpt)
            print(f"{written / 1e9:7.2f} {ours:9.0f} {peer:9.0f} {ours / bound:11.2f} "
                  f"{ours / peer:10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
