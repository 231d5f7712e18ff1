"""``opbridge demo``: the main job on the built-in demo model (:mod:`opbridge.demo`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from opbridge.demo import run_demo

HELP = "export, run in ONNX Runtime, compare and time the built-in demo model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="where to write models")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per path")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    lines = run_demo(args.out, runs=args.runs, seed=args.seed)
    print("\n".join(lines))
    return 0 if lines[-1].startswith("agreement: PASS") else 1
