"""``opbridge package-op``: a user's operator project as a wheel another
environment installs (:mod:`opbridge.sdk.package`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opbridge.sdk.package import build_wheel, inspect_wheel

HELP = (
    "build an operator project's wheel (every runtime library, bundled dependencies) and check it"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project", type=Path, help="the project folder (its pyproject.toml)")
    parser.add_argument(
        "-o", "--out", type=Path, default=Path("dist"), help="where the wheel goes (default: dist)"
    )
    parser.add_argument(
        "--build-dir", type=Path, help="CMake's build folder (default: the project's)"
    )
    parser.add_argument(
        "-C",
        "--config-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a build setting for pip wheel, as pip's -C (cmake.define.NAME=VALUE)",
    )
    parser.add_argument("--verbose", action="store_true", help="show pip's and CMake's output")


def run(args: argparse.Namespace) -> int:
    try:
        wheel = build_wheel(
            args.project,
            args.out,
            build_dir=args.build_dir,
            settings=args.config_setting,
            verbose=args.verbose,
        )
        report = inspect_wheel(wheel)
    except (FileNotFoundError, RuntimeError) as error:
        print(error, file=sys.stderr)
        return 2
    print(f"wrote {wheel}")
    print(report.table())
    print(f"requires: {', '.join(report.requires) or '-'}")
    if report.problems:
        for problem in report.problems:
            print(f"opbridge package-op: {problem}", file=sys.stderr)
        return 1
    package = next(
        (lib.path.split("/")[0] for lib in report.libraries if lib.role.startswith("extension")),
        None,
    )
    print(f"\nnext, in the environment to ship to: pip install {wheel.name}")
    if package:
        print(f"then: opbridge check-op {package}")
    return 0
