"""ONNX Runtime time of every operator by every route, side by side.

For each operator: its benchmark inputs (``Card.bench_inputs``) at the
benchmark's ``dram`` size (or ``--size rows,cols``), exported once per route
(``custom``, ``standard`` at ``--opset``, ``ort``), each run in ONNX Runtime
(all graph optimizations, ``--threads`` intra-op threads) back to back on
the same inputs: median ms per route and its ratio to the custom route
(above 1: slower than custom).

    .venv/bin/python benchmarks/routes.py [--threads 2] [--opset 23] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import time
import warnings

import torch

import opbridge
from opbridge.autoroute import Call, _one_call
from opbridge.bench import op_sizes
from opbridge.ops import cards
from opbridge.runtimes.onnxruntime import InferenceSession


def _time(model: bytes, feeds: dict, threads: int, repeats: int) -> float:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = InferenceSession(model, sess_options=options)
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        session.run(None, feeds)
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--opset", type=int, default=23)
    parser.add_argument("--size", default=None, help="rows,cols (default: the dram size)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    shape = [int(v) for v in args.size.split(",")] if args.size else op_sizes(False)["dram"]
    routes = ("custom", "standard", "ort")
    rows = []
    print(f"size {shape[0]}x{shape[1]}, float32, {args.threads} threads, opset {args.opset}")
    print(f"{'op':18s}" + "".join(f"{r + ' ms (x custom)':>24s}" for r in routes) + "  ort nodes")
    for qualified, card in cards().items():
        inputs = card.bench_inputs(shape, torch.float32)
        module = _one_call(qualified, Call(qualified, tuple(inputs), {})).eval()
        tensors = tuple(a for a in inputs if isinstance(a, torch.Tensor))
        feeds_of = {}
        measured = {}
        fused = ""
        for route in routes:
            with contextlib.redirect_stdout(io.StringIO()):
                proto = opbridge.onnx.export(
                    module, tensors, route=route, opset=args.opset, dynamo=True, verbose=False
                )
            names = [i.name for i in proto.graph.input]
            feeds_of[route] = {n: t.numpy() for n, t in zip(names, tensors, strict=True)}
            measured[route] = _time(
                proto.SerializeToString(), feeds_of[route], args.threads, args.repeats
            )
            if route == "ort":
                fused = ", ".join(
                    sorted(
                        {
                            f"{n.domain or 'ai.onnx'}::{n.op_type}"
                            for n in proto.graph.node
                            if n.op_type
                            not in (
                                "Reshape",
                                "Shape",
                                "Slice",
                                "Concat",
                                "Constant",
                                "Expand",
                                "Range",
                                "ReduceProd",
                                "Add",
                            )
                        }
                    )
                )
        base = measured["custom"]
        print(
            f"{card.name:18s}"
            + "".join(f"{measured[r]:15.3f} ({measured[r] / base:5.2f}x)" for r in routes)
            + f"  {fused}"
        )
        rows.append({"op": card.name, "shape": shape, "ms": measured, "ort_nodes": fused})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "opset": args.opset, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
