"""Training on 2 processes (gloo, CPU): the Llama-style model of
tests/distributed/llama_block.py with opbridge's ops (rms_norm,
rotary_embedding, add_rms_norm, bias_gelu) and with PyTorch's own, side by
side in one run:

- the DDP step time (forward, backward, SGD step; each rank half the batch),
  the two models timed in alternating rounds, median per step, and their
  ratio;
- under tensor + sequence parallel, the collectives of one training step
  (forward and backward, counted by ``CommDebugMode``) and their bytes (the
  input tensors of each collective).

    .venv/bin/python benchmarks/distributed.py [--dim 512 --seq 256 ...] [--md out.md]

It starts its 2 processes itself (``torch.distributed.run``, a free port).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "distributed"))

from two_processes import torchrun  # noqa: E402

SIZES = ("dim", "heads", "hidden", "seq", "batch", "blocks")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1408)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--md", default=None, help="also write the Markdown table here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def ddp_step_times(lb, args) -> dict[str, list[float]]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    models = {}
    for fused in (True, False):
        model = DistributedDataParallel(lb.Model(fused))
        models[fused] = (model, torch.optim.SGD(model.parameters(), lr=1e-3))
    x = lb.inputs(1)[0].chunk(dist.get_world_size())[dist.get_rank()]

    def step(fused: bool) -> None:
        model, optimizer = models[fused]
        lb.loss_of(model(x)).backward()
        optimizer.step()
        optimizer.zero_grad()

    for fused in (True, False):
        for _ in range(2):
            step(fused)
    times: dict[str, list[float]] = {"opbridge": [], "torch": []}
    for _ in range(args.rounds):
        for fused in (True, False):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.steps):
                step(fused)
            elapsed = torch.tensor((time.perf_counter() - start) / args.steps)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            times["opbridge" if fused else "torch"].append(elapsed.item())
    return times


def tp_collectives(lb, fused: bool) -> dict:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.debug._comm_mode import NATIVE_TO_PY_MAPPING, c10d_collective_ops
    from torch.utils._pytree import tree_leaves

    class CommBytes(CommDebugMode):
        """CommDebugMode, adding up the bytes of each collective's inputs."""

        def __init__(self):
            super().__init__()
            self.bytes = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            packet = getattr(func, "_overloadpacket", None)
            if packet in self.comm_registry or packet in c10d_collective_ops:
                # Counted under CommDebugMode's name for it; the first tensor
                # is what the collective sends (a shard to gather, a tensor
                # to reduce-scatter).
                tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
                key = NATIVE_TO_PY_MAPPING.get(packet, packet)
                self.bytes[key] += sum(t.numel() * t.element_size() for t in tensors[:1])
            return super().__torch_dispatch__(func, types, args, kwargs)

    mesh = init_device_mesh("cpu", (2,))
    model = lb.parallelize(lb.Model(fused), mesh)
    x = lb.inputs(1)[0]
    mode = CommBytes()
    with mode:
        y = model(distribute_tensor(x, mesh, [Shard(1)]))
        lb.loss_of(y.full_tensor()).backward()
    return {
        "counts": {str(k): v for k, v in mode.get_comm_counts().items()},
        "bytes": {str(k): v for k, v in mode.bytes.items()},
    }


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    import llama_block as lb

    lb.configure(**{name: getattr(args, name) for name in SIZES})
    result = {
        "ddp_step_s": ddp_step_times(lb, args),
        "tp_sp": {
            "opbridge": tp_collectives(lb, True),
            "torch": tp_collectives(lb, False),
        },
    }
    if dist.get_rank() == 0:
        Path(args.worker).write_text(json.dumps(result))
    dist.destroy_process_group()


def markdown(args, result) -> str:
    times = {k: statistics.median(v) * 1e3 for k, v in result["ddp_step_s"].items()}
    sizes = ", ".join(f"{name} {getattr(args, name)}" for name in SIZES)
    lines = [
        "# Distributed training: opbridge's ops vs PyTorch's (2 processes, gloo, CPU)",
        "",
        "`.venv/bin/python benchmarks/distributed.py` on the Llama-style model of "
        "`tests/distributed/llama_block.py`; both models in the same run. "
        f"{sizes}; {args.threads} torch thread(s) per process; 2-core machine, load "
        f"average {args.load:.1f} when the run began (absolute times vary with it; the "
        "ratio is side by side).",
        "",
        f"## DDP step (median of {args.rounds} rounds of {args.steps} steps, alternating)",
        "",
        "| model | ms per step | ratio (torch / opbridge) |",
        "|---|---|---|",
        f"| opbridge ops | {times['opbridge']:.2f} | {times['torch'] / times['opbridge']:.2f}x |",
        f"| torch ops | {times['torch']:.2f} | 1.00x |",
        "",
        "## Tensor + sequence parallel: collectives of one step (forward and backward)",
        "",
        "| model | collective | count | bytes (inputs) |",
        "|---|---|---|---|",
    ]
    for name in ("opbridge", "torch"):
        found = result["tp_sp"][name]
        for op, count in sorted(found["counts"].items()):
            lines.append(f"| {name} ops | `{op}` | {count} | {found['bytes'].get(op, 0)} |")
        total = sum(found["bytes"].values())
        lines.append(f"| {name} ops | total | {sum(found['counts'].values())} | {total} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse()
    if args.worker:
        worker(args)
        return
    args.load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        forwarded = [f"--{k}={getattr(args, k)}" for k in (*SIZES, "rounds", "steps", "threads")]
        command = torchrun(__file__, *forwarded, f"--worker={out}")
        subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        result = json.loads(out.read_text())
    text = markdown(args, result)
    print(text)
    if args.md:
        Path(args.md).write_text(text)


if __name__ == "__main__":
    main()
