"""Every opbridge operator on the GPU at a DRAM-sized shape, against eager
PyTorch (the composite a user would write, and PyTorch's own operator where
one exists) and ``torch.compile`` of the composite, as a share of the
measured device-to-device copy bandwidth.

Bytes moved = every tensor input read once + every output written once
(what a one-pass kernel must move). Times are CUDA-event medians of
``--repeat`` calls after warm-up; ratios come from the same run.

    python benchmarks/gpu_bench.py --json out.json --markdown out.md
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

import opbridge
from opbridge.ops import card


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    return []


def _bytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(value))


def _to_cuda(value, requires_grad=False):
    if isinstance(value, torch.Tensor):
        moved = value.detach().cuda()
        return moved.requires_grad_(requires_grad and moved.is_floating_point())
    if isinstance(value, tuple | list):
        return type(value)(_to_cuda(v, requires_grad) for v in value)
    return value


def median_ms(fn, repeat: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(nbytes: int, repeat: int) -> float:
    """Device-to-device copy, bytes read + written per second (GB/s)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), repeat)
    return 2 * nbytes / ms / 1e6


def _implementations(c):
    impls = {"opbridge": c.call}
    if c.composite is not None:
        impls["eager_composite"] = c.composite
        impls["torch_compile"] = torch.compile(c.composite, fullgraph=True)
    if c.builtin is not None:
        impls["eager_builtin"] = c.builtin
    return impls


def bench_op(name: str, shape, dtype, repeat: int, backward: bool, copy_gbps: float) -> list[dict]:
    c = card(name)
    rows = []
    args = _to_cuda(c.bench_inputs(shape, dtype))
    args = args if isinstance(args, tuple) else (args,)
    out = c.call(*args)
    moved = _bytes(args) + _bytes(out)
    for impl, fn in _implementations(c).items():
        ms = median_ms(lambda fn=fn: fn(*args), repeat)
        rows.append(
            {
                "op": name,
                "dtype": str(dtype).removeprefix("torch."),
                "shape": list(shape),
                "pass": "forward",
                "impl": impl,
                "ms": ms,
                "gbps": moved / ms / 1e6,
                "copy_share": moved / ms / 1e6 / copy_gbps,
            }
        )
    if backward and c.bench_backward:
        grad_args = _to_cuda(c.bench_inputs(shape, dtype), requires_grad=True)
        grad_args = grad_args if isinstance(grad_args, tuple) else (grad_args,)
        leaves = [t for t in _tensors(grad_args) if t.requires_grad]
        first = c.call(*grad_args)
        first = first[0] if isinstance(first, tuple | list) else first
        grad = torch.randn_like(first)
        for impl, fn in _implementations(c).items():

            def step(fn=fn):
                result = fn(*grad_args)
                result = result[0] if isinstance(result, tuple | list) else result
                torch.autograd.grad(result, leaves, grad, allow_unused=True)

            ms = median_ms(step, repeat)
            rows.append(
                {
                    "op": name,
                    "dtype": str(dtype).removeprefix("torch."),
                    "shape": list(shape),
                    "pass": "forward+backward",
                    "impl": impl,
                    "ms": ms,
                    "gbps": None,
                    "copy_share": None,
                }
            )
    return rows


def markdown(rows: list[dict], copy_gbps: float, device: str) -> str:
    lines = [
        f"GPU: {device}; torch {torch.__version__}; measured copy bandwidth {copy_gbps:.0f} GB/s "
        "(read + write).",
        "",
        "| op | dtype | pass | opbridge ms | GB/s | % of copy | vs eager composite "
        "| vs torch.compile | vs eager builtin |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted(
        {(r["op"], r["dtype"], r["pass"]) for r in rows}, key=lambda k: (k[0], k[1], k[2])
    )
    for op, dtype, pass_ in keys:
        group = {
            r["impl"]: r for r in rows if (r["op"], r["dtype"], r["pass"]) == (op, dtype, pass_)
        }
        ours = group["opbridge"]

        def ratio(impl, group=group, ours=ours):
            return f"{group[impl]['ms'] / ours['ms']:.2f}x" if impl in group else "-"

        gbps = f"{ours['gbps']:.0f}" if ours["gbps"] is not None else "-"
        share = f"{100 * ours['copy_share']:.0f}%" if ours["copy_share"] is not None else "-"
        lines.append(
            f"| {op} | {dtype} | {pass_} | {ours['ms']:.3f} | {gbps} | {share} | "
            f"{ratio('eager_composite')} | {ratio('torch_compile')} | {ratio('eager_builtin')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--no-backward", action="store_true")
    parser.add_argument("--ops", default="", help="comma-separated; default all")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_bench: no CUDA device")
    device = torch.cuda.get_device_name()
    shape = [args.rows, args.cols]
    copy_gbps = copy_bandwidth(args.rows * args.cols * 4, args.repeat)
    names = args.ops.split(",") if args.ops else sorted(opbridge.specs())
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for name in names:
            rows += bench_op(name, shape, dtype, args.repeat, not args.no_backward, copy_gbps)
            print(f"{name} {dtype_name}: done", flush=True)
    table = markdown(rows, copy_gbps, device)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "copy_gbps": copy_gbps, "rows": rows}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
