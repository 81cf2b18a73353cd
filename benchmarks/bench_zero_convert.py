"""Peak memory of turning a DeepSpeed ZeRO checkpoint into fp32 SafeTensors, ours against
DeepSpeed's own ``zero_to_fp32``.

DeepSpeed (on the CPU: ``DS_ACCELERATOR=cpu``, gloo) trains a stack of bias-free
``Linear(width, width)`` layers for one AdamW step under ZeRO (stage 2 unless ``--stage``
says) in bf16 and saves its checkpoint, in processes of its own that exit before anything is
measured (``--ranks N``: N processes, so the checkpoint holds N partitions of every flat
group). Then, each in a fresh process, the peak resident size (``ru_maxrss`` of that child)
of:

- ours: ``weightstore convert CKPT out.safetensors`` (fp32 weights rebuilt from the flat
  partitions one parameter at a time, torch never imported);
- the peer: ``deepspeed.utils.zero_to_fp32.convert_zero_checkpoint_to_fp32_state_dict``,
  DeepSpeed's script, which reads every rank's partitions whole.

Both outputs are compared tensor for tensor. Run ``.venv/bin/python
benchmarks/bench_zero_convert.py --layers 16 --width 4096`` (1 GiB of fp32 weights; ``--quick``:
a few MiB, to check the script).
"""

from __future__ import annotations

import argparse
import compileall
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

_TRAIN = textwrap.dedent(
    """
    import sys, torch, deepspeed
    from torch import nn
    layers, width, path, stage = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    model = nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(layers)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage},
              "bf16": {"enabled": True}, "zero_allow_untested_optimizer": True,
              "steps_per_print": 1000}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    engine.backward(engine(torch.randn(1, width, dtype=torch.bfloat16)).float().sum())
    engine.step()
    engine.save_checkpoint(path)
    """
)
_PEER = textwrap.dedent(
    """
    import sys
    from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict
    convert_zero_checkpoint_to_fp32_state_dict(sys.argv[1], sys.argv[2], safe_serialization=True)
    """
)
_COMPARE = textwrap.dedent(
    """
    import sys, glob, numpy as np
    from safetensors.numpy import load_file
    ours = load_file(sys.argv[1])
    theirs = {}
    for shard in sorted(glob.glob(sys.argv[2] + "/*.safetensors")):
        theirs.update(load_file(shard))
    assert sorted(ours) == sorted(theirs), (sorted(ours)[:3], sorted(theirs)[:3])
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours), "values differ"
    print(len(ours))
    """
)


def _peak_mib(command: list[str], env: dict[str, str]) -> float:
    """Run `command`; its peak resident size in MiB (Linux reports ``ru_maxrss`` in KiB)."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command[:4]} failed")
    return usage.ru_maxrss / 1024


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--ranks", type=int, default=1, help="gloo processes that train and save")
    parser.add_argument("--stage", type=int, choices=(1, 2, 3), default=2)
    parser.add_argument("--quick", action="store_true", help="4 layers of 256")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.width = 4, 256
    root = Path(__file__).resolve().parent.parent
    compileall.compile_dir(str(root / "src"), quiet=1)  # time the library, not the compiler
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as scratch_dir:
        scratch = Path(scratch_dir)
        env = {
            **os.environ, "DS_ACCELERATOR": "cpu", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()), "WORLD_SIZE": str(args.ranks),
            "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(scratch / "ext")),
        }  # fmt: skip
        ckpt = scratch / "ckpt"
        train = [sys.executable, "-c", _TRAIN, str(args.layers), str(args.width), str(ckpt),
                 str(args.stage)]  # fmt: skip
        ranks = [
            subprocess.Popen(
                train, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.DEVNULL
            )
            for r in range(args.ranks)
        ]
        if any(rank.wait() != 0 for rank in ranks):
            raise SystemExit("training failed")
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
        ours_out = scratch / "ours.safetensors"
        ours = _peak_mib([sys.executable, "-m", "weightstore", "convert", str(ckpt),
                          str(ours_out), "-q"], env)  # fmt: skip
        peer = _peak_mib([sys.executable, "-c", _PEER, str(ckpt), str(scratch / "peer")], env)
        compared = subprocess.run(
            [sys.executable, "-c", _COMPARE, str(ours_out), str(scratch / "peer")],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        tensor_mib = args.width * args.width * 4 / 2**20
        fp32_mib = args.layers * tensor_mib
        print(f"ZeRO-{args.stage} bf16 on {args.ranks} rank(s), {args.layers} x "
              f"Linear({args.width}, {args.width}): checkpoint "
              f"{size / 2**20:,.0f} MiB, fp32 weights {fp32_mib:,.0f} MiB, largest tensor "
              f"{tensor_mib:,.0f} MiB; {compared.stdout.strip()} tensors equal")  # fmt: skip
        print("ours_MiB  peer_MiB  ours/peer")
        print(f"{ours:8.0f} {peer:9.0f} {ours / peer:10.3f}")


if __name__ == "__main__":
    main()
