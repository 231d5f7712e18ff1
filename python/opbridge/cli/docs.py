"""``opbridge docs``: the operator reference generated from the specs."""

from __future__ import annotations

import argparse
from pathlib import Path

from opbridge.sdk.docs import render_operators

HELP = "write the operator reference generated from the specs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="file to write (default: stdout)")


def run(args: argparse.Namespace) -> int:
    text = render_operators()
    if args.out is None:
        print(text)
    else:
        args.out.write_text(text + "\n")
    return 0
