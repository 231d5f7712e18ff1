"""opbridge command line (``opbridge COMMAND`` or ``python -m opbridge COMMAND``)."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each command is a module with HELP, add_arguments(parser) and run(args) -> exit status.
COMMANDS = {
    "bench": "opbridge.bench",
    "demo": "opbridge.demo",
    "docs": "opbridge.docs",
    "doctor": "opbridge.doctor",
    "export": "opbridge.export_cli",
    "new-op": "opbridge.scaffold",
    "package": "opbridge.package",
    "quantize": "opbridge.quantize",
    "verify": "opbridge.verify.cli",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opbridge", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    modules = {name: importlib.import_module(path) for name, path in COMMANDS.items()}
    for name, module in modules.items():
        module.add_arguments(commands.add_parser(name, help=module.HELP))
    args = parser.parse_args(argv)
    _quiet_exporters()
    return modules[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
