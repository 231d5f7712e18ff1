"""Command line: ``opbridge demo`` (or ``python -m opbridge demo``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _quiet_exporters() -> None:
    """Keeps the report readable: the exporters' progress lines and known
    deprecation notices carry nothing for this tool's user."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="torch.onnx")
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opbridge", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="export, run and time the built-in demo model")
    demo.add_argument("--out", type=Path, default=Path("out/demo"), help="where to write models")
    demo.add_argument("--runs", type=int, default=30, help="timed runs per path")
    demo.add_argument("--seed", type=int, default=0)
    docs = commands.add_parser("docs", help="write the operator reference generated from the specs")
    docs.add_argument("--out", type=Path, default=None, help="file to write (default: stdout)")
    args = parser.parse_args(argv)

    _quiet_exporters()
    if args.command == "demo":
        from opbridge.demo import run_demo

        lines = run_demo(args.out, runs=args.runs, seed=args.seed)
        print("\n".join(lines))
        return 0 if lines[-1].startswith("agreement: PASS") else 1
    if args.command == "docs":
        from opbridge.docs import render_operators

        text = render_operators()
        if args.out is None:
            print(text)
        else:
            args.out.write_text(text + "\n")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
