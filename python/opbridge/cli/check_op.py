"""``opbridge check-op``: the SDK's checks of every operator of an installed
package (:func:`opbridge.sdk.testing.check_package`)."""

from __future__ import annotations

import argparse
import sys

HELP = "run opbridge.sdk.testing's checks on every operator of an installed package"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("package", help="the Python package to import (my_fused_ops)")


def run(args: argparse.Namespace) -> int:
    from opbridge.sdk.testing import check_package

    try:
        check_package(args.package, log=lambda line: print(line, flush=True))
    except (ImportError, LookupError) as error:
        print(f"opbridge check-op: {error}", file=sys.stderr)
        return 2
    except AssertionError as error:
        print(f"opbridge check-op: {error}", file=sys.stderr)
        return 1
    print(f"{args.package}: every check passed")
    return 0
