"""opbridge command line (``opbridge COMMAND`` or ``python -m opbridge COMMAND``).

Each command is one module here with ``HELP``, ``add_arguments(parser)`` and
``run(args) -> exit status``, and one entry in :data:`COMMANDS`. What several
commands share (the model loader, ``--import``, every flag two commands
take) is in :mod:`opbridge.cli.common`, defined once.
"""

from __future__ import annotations

import argparse
import importlib

# Command name -> its module, in the order ``--help`` lists them.
COMMANDS = {
    "bench": "opbridge.cli.bench",
    "check-op": "opbridge.cli.check_op",
    "demo": "opbridge.cli.demo",
    "docs": "opbridge.cli.docs",
    "doctor": "opbridge.cli.doctor",
    "export": "opbridge.cli.export",
    "new-op": "opbridge.cli.new_op",
    "package": "opbridge.cli.package",
    "package-op": "opbridge.cli.package_op",
    "quantize": "opbridge.cli.quantize",
    "verify": "opbridge.cli.verify",
}


def _quiet_exporters() -> None:
    """Keeps reports readable: the exporters' progress lines and known
    deprecation notices carry nothing for this tool's user."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")
    warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="torch.onnx")
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)


def build_parser() -> argparse.ArgumentParser:
    """The ``opbridge`` argument parser: one sub-command per entry of
    ``COMMANDS`` (the documentation's CLI reference is rendered from it)."""
    parser = argparse.ArgumentParser(prog="opbridge", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, path in COMMANDS.items():
        module = importlib.import_module(path)
        module.add_arguments(commands.add_parser(name, help=module.HELP))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet_exporters()
    return importlib.import_module(COMMANDS[args.command]).run(args)
