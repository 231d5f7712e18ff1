"""ONNX Runtime's plain ``run()`` against IO binding (``opbridge.runtimes.onnxruntime.bind``),
side by side on the same session and inputs.

Cases: ``scaled_clamp`` and ``rms_norm`` at the benchmark's ``dram`` size
(where a fresh output per call is the most memory traffic there is), and the
demo model. Custom route, ``--threads`` intra-op threads, median ms of
``--repeats`` runs each; the ratio is plain / bound (above 1: binding pays).

    .venv/bin/python benchmarks/io_binding.py [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
import warnings

import onnxruntime
import torch

import opbridge
from opbridge.autoroute import Call, _one_call
from opbridge.bench import op_sizes
from opbridge.demo import build_demo
from opbridge.ops import card
from opbridge.runtimes.onnxruntime import bind


def _median_ms(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    dram = op_sizes(False)["dram"]
    cases = {}
    for op in ("scaled_clamp", "rms_norm"):
        inputs = card(op).bench_inputs(dram, torch.float32)
        qualified = f"opbridge::{op}"
        cases[f"{op} {dram[0]}x{dram[1]}"] = (
            _one_call(qualified, Call(qualified, tuple(inputs), {})).eval(),
            tuple(a for a in inputs if isinstance(a, torch.Tensor)),
        )
    cases["demo model"] = build_demo()
    print(f"{args.threads} threads; median ms of {args.repeats} runs")
    print(f"{'case':28s} {'run() ms':>10s} {'bound ms':>10s} {'run/bound':>10s}")
    for label, (model, tensors) in cases.items():
        with contextlib.redirect_stdout(io.StringIO()):
            proto = opbridge.export.export(model, tensors, route="custom", verbose=False)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = opbridge.runtimes.onnxruntime.InferenceSession(proto, sess_options=options)
        names = [i.name for i in session.get_inputs()]
        feeds = {n: t.numpy() for n, t in zip(names, tensors, strict=True)}
        bound = bind(session, feeds)
        plain = _median_ms(lambda s=session, f=feeds: s.run(None, f), args.repeats)
        with_binding = _median_ms(bound.run, args.repeats)
        print(f"{label:28s} {plain:10.3f} {with_binding:10.3f} {plain / with_binding:9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
