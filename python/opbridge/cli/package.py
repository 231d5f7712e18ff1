"""``opbridge package``: a Triton model repository for an ONNX model with its
custom-op libraries (:mod:`opbridge.deploy.triton`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opbridge.cli.common import (
    FactoryError,
    add_import_argument,
    add_threads_argument,
    import_modules,
    require_libraries,
)
from opbridge.deploy.triton import triton_repository

HELP = "package an ONNX model with its custom-op libraries (a Triton model repository)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--triton", type=Path, required=True, help="the model repository folder")
    parser.add_argument("model", type=Path, help="the ONNX model")
    parser.add_argument("--name", help="the model's name in the repository (default: file stem)")
    parser.add_argument("--max-batch-size", type=int, default=8)
    add_threads_argument(parser, "intra-op threads per instance")
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--mount", help="the repository's path as the server sees it")
    add_import_argument(parser)


def run(args: argparse.Namespace) -> int:
    try:
        import_modules(args.imports)
        if args.model.is_file():
            require_libraries(args.model)
        folder = triton_repository(
            args.model,
            args.triton,
            name=args.name,
            max_batch_size=args.max_batch_size,
            threads=args.threads,
            instances=args.instances,
            mount=args.mount,
        )
    except (ValueError, FileNotFoundError, RuntimeError, FactoryError) as error:
        print(f"opbridge package: {error}", file=sys.stderr)
        return 2
    print(f"wrote {folder} (config.pbtxt, 1/model.onnx and its custom-op libraries)")
    return 0
