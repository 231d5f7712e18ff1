"""int8 against float in ONNX Runtime, with the accuracy it costs.

The LLaMA-style block (``--dim``, ``--heads``, ``--hidden``, ``--seq``) and
the small vision model (``--size`` square uint8 images), each exported by the
custom route with a dynamic batch, quantized by ``opbridge.deploy.quantize``
(static QDQ calibrated on ``--calibration`` random samples; dynamic), then
timed back to back on the same input (ONNX Runtime, all optimizations,
``--threads``): median ms and the int8/float speed-up; and compared with the
float PyTorch model over ``--samples`` random inputs (the data-set report).

    .venv/bin/python benchmarks/quantize.py [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch

import opbridge
from opbridge.demo.models import LlamaStyleBlock, SmallVisionNet
from opbridge.deploy.quantize import dataset_report, quantize


def _median_ms(path: Path, feeds: dict, threads: int, repeats: int) -> float:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = opbridge.runtimes.onnxruntime.InferenceSession(str(path), sess_options=options)
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        session.run(None, feeds)
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def _draw(example: torch.Tensor, generator: torch.Generator) -> np.ndarray:
    if example.dtype == torch.uint8:
        return torch.randint(0, 256, example.shape, generator=generator, dtype=torch.uint8).numpy()
    return torch.randn(example.shape, generator=generator).numpy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=2816)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's pre-processing advice
    torch.manual_seed(0)
    models = {
        "llama_block": (
            LlamaStyleBlock(
                dim=args.dim, heads=args.heads, hidden=args.hidden, max_seq_len=args.seq
            ).eval(),
            torch.randn(1, args.seq, args.dim),
        ),
        "vision": (
            SmallVisionNet().eval(),
            torch.randint(0, 256, (1, args.size, args.size, 3), dtype=torch.uint8),
        ),
    }
    rows = []
    scratch = Path(tempfile.mkdtemp())
    print(f"{args.threads} threads; ms are medians of {args.repeats} runs")
    print(
        f"{'model':12s} {'mode':8s} {'float ms':>9s} {'int8 ms':>9s} {'speed-up':>9s}  "
        f"accuracy over {args.samples} samples (max abs err p50/p99, min cosine)"
    )
    for name, (model, example) in models.items():
        float_path = scratch / f"{name}.onnx"
        with contextlib.redirect_stdout(io.StringIO()):
            proto = opbridge.export.export(
                model, (example,), float_path, route="custom", dynamic_batch=True, verbose=False
            )
        input_name = proto.graph.input[0].name
        g = torch.Generator().manual_seed(1)
        calibration = [{input_name: _draw(example, g)} for _ in range(args.calibration)]
        data = [{input_name: _draw(example, g)} for _ in range(args.samples)]
        feeds = {input_name: example.numpy()}
        float_ms = _median_ms(float_path, feeds, args.threads, args.repeats)
        for mode in ("static", "dynamic"):
            int8_path = scratch / f"{name}_{mode}.onnx"
            quantize(float_path, int8_path, calibration if mode == "static" else None, mode=mode)
            int8_ms = _median_ms(int8_path, feeds, args.threads, args.repeats)
            summary = dataset_report(int8_path, model, data).summary()
            rows.append(
                {
                    "model": name,
                    "mode": mode,
                    "float_ms": float_ms,
                    "int8_ms": int8_ms,
                    "speedup": float_ms / int8_ms,
                    "accuracy": summary,
                    "nodes": len(onnx.load(int8_path, load_external_data=False).graph.node),
                }
            )
            err = summary["max_abs_err"]
            print(
                f"{name:12s} {mode:8s} {float_ms:9.3f} {int8_ms:9.3f} {float_ms / int8_ms:8.2f}x  "
                f"{err['p50']:.3g}/{err['p99']:.3g}, {summary['cosine']['min']:.5f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
