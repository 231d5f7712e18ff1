"""A runtime's time of every operator by every route, side by side.

For each operator: its benchmark inputs (``Card.bench_inputs``) at the
benchmark's ``dram`` size (or ``--size rows,cols``), exported once per route
(``--routes``, by default ``custom``, ``standard`` at ``--opset``, ``ort``),
each run in ``--runtime`` (ONNX Runtime with all graph optimizations, or
OpenVINO on the CPU, in float32; ``--threads`` threads) back to back on the
same inputs: median ms per route and its ratio to the custom route (above 1:
slower than custom). ``--import PACKAGE`` adds a user package's operators
(imported, which loads its library and registers its cards); ``--ops`` keeps
the ones named (``myops::softmax_lse`` or ``softmax_lse``).

    .venv/bin/python benchmarks/routes.py [--threads 2] [--opset 23] [--json out.json]
    .venv/bin/python benchmarks/routes.py --runtime openvino --routes custom,function \
        --import my_fused_ops --ops myops::softmax_lse myops::fused_norm
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
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


def _runner(runtime: str, model: bytes, feeds: dict, threads: int):
    """A call that runs the model once on ``feeds`` in ``runtime``."""
    if runtime == "openvino":
        from opbridge.runtimes.openvino import compile_model

        request = compile_model(model, threads=threads).create_infer_request()
        return lambda: request.infer(feeds)
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = InferenceSession(model, sess_options=options)
    return lambda: session.run(None, feeds)


def _time(runtime: str, model: bytes, feeds: dict, threads: int, repeats: int) -> float:
    run = _runner(runtime, model, feeds, threads)
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        run()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def _wanted(qualified: str, ops: list[str] | None) -> bool:
    return ops is None or qualified in ops or qualified.split("::")[-1] in ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--opset", type=int, default=23)
    parser.add_argument("--size", default=None, help="rows,cols (default: the dram size)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=None)
    parser.add_argument("--runtime", choices=("onnxruntime", "openvino"), default="onnxruntime")
    parser.add_argument(
        "--routes", default="custom,standard,ort", help="comma-separated, custom first"
    )
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="PACKAGE")
    parser.add_argument("--ops", nargs="+", default=None, help="only these operators")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    for package in args.imports:
        importlib.import_module(package)
    shape = [int(v) for v in args.size.split(",")] if args.size else op_sizes(False)["dram"]
    routes = tuple(args.routes.split(","))
    if routes[0] != "custom":
        parser.error(f"--routes must start with custom (the ratios' base), got {args.routes}")
    rows = []
    print(
        f"{args.runtime}: size {shape[0]}x{shape[1]}, float32, {args.threads} threads, "
        f"opset {args.opset}"
    )
    print(f"{'op':18s}" + "".join(f"{r + ' ms (x custom)':>24s}" for r in routes) + "  ort nodes")
    for qualified, card in cards().items():
        if not _wanted(qualified, args.ops):
            continue
        inputs = card.bench_inputs(shape, torch.float32)
        module = _one_call(qualified, Call(qualified, tuple(inputs), {})).eval()
        tensors = tuple(a for a in inputs if isinstance(a, torch.Tensor))
        feeds_of = {}
        measured = {}
        fused = ""
        for route in routes:
            with contextlib.redirect_stdout(io.StringIO()):
                proto = opbridge.export.export(
                    module, tensors, route=route, opset=args.opset, dynamo=True, verbose=False
                )
            names = [i.name for i in proto.graph.input]
            feeds_of[route] = {n: t.numpy() for n, t in zip(names, tensors, strict=True)}
            measured[route] = _time(
                args.runtime, proto.SerializeToString(), feeds_of[route], args.threads, args.repeats
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
            json.dump(
                {
                    "runtime": args.runtime,
                    "threads": args.threads,
                    "opset": args.opset,
                    "rows": rows,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
