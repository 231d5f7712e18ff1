"""``opbridge new-op``: a new out-of-tree operator project (:mod:`opbridge.sdk.scaffold`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from opbridge.sdk.scaffold import write

HELP = "write a new out-of-tree operator project (spec, kernel, card, tests) on the opbridge SDK"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path, help="the project folder to create (empty or new)")
    parser.add_argument("--name", required=True, help="the operator's name, snake_case (soft_cap)")
    parser.add_argument(
        "--namespace", default=None, help="PyTorch namespace and Python package (default NAME_ops)"
    )
    parser.add_argument(
        "--domain",
        default=None,
        help="ONNX domain of the custom route (default com.example.NAMESPACE)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        written = write(args.directory, args.name, args.namespace, args.domain)
    except (ValueError, FileExistsError) as error:
        print(error)
        return 2
    for path in written:
        print(path)
    directory = args.directory
    print(f"\nnext: pip install --no-build-isolation -e {directory} && pytest {directory}/tests")
    return 0
