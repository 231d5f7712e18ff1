"""``opbridge new-op``: a new out-of-tree operator project (:mod:`opbridge.sdk.scaffold`),
or, with ``--from-op``, the SDK project of an operator you already have
(:mod:`opbridge.sdk.adopt`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from opbridge.cli.common import add_import_argument, import_modules
from opbridge.sdk.scaffold import write

HELP = "write a new out-of-tree operator project (spec, kernel, card, tests) on the opbridge SDK"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path, help="the project folder to create (empty or new)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--name", help="the operator's name, snake_case (soft_cap)")
    source.add_argument(
        "--from-op",
        metavar="NS::NAME",
        help="an operator you already have (a cpp_extension's TORCH_LIBRARY op, a "
        "torch.library.custom_op): spec, kernel frame and card from its registered schema; "
        "--import the module that registers it",
    )
    add_import_argument(parser)
    parser.add_argument(
        "--namespace",
        default=None,
        help="PyTorch namespace and Python package (default NAME_ops; with --from-op, the op's)",
    )
    parser.add_argument(
        "--domain",
        default=None,
        help="ONNX domain of the custom route (default com.example.NAMESPACE)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.from_op:
            from opbridge.ops.adopted import UnsupportedSchemaError
            from opbridge.sdk.adopt import write_from_op

            import_modules(args.imports)
            try:
                written = write_from_op(args.directory, args.from_op, args.namespace, args.domain)
            except UnsupportedSchemaError as error:
                raise ValueError(f"opbridge new-op --from-op {args.from_op}: {error}") from error
        else:
            written = write(args.directory, args.name, args.namespace, args.domain)
    except (ValueError, FileExistsError) as error:
        print(error)
        return 2
    for path in written:
        print(path)
    directory = args.directory
    print(f"\nnext: pip install --no-build-isolation -e {directory} && pytest {directory}/tests")
    return 0
