"""What the commands share: the model loader (``path/to/file.py:function``
or ``demo``), ``--import`` for a user's operator library, and the flags
several commands take (route, runtime, opset, exporter, batch and sequence
dimensions, threads)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

from opbridge.sdk import factory
from opbridge.sdk.factory import FactoryError

__all__ = [
    "FACTORY_FORM",
    "FactoryError",
    "add_batch_arguments",
    "add_dynamic_sequence_argument",
    "add_import_argument",
    "add_legacy_argument",
    "add_model_argument",
    "add_opset_argument",
    "add_route_argument",
    "add_runtime_argument",
    "add_threads_argument",
    "build_model",
    "import_modules",
    "int_list",
    "load_factory",
    "require_libraries",
]

FACTORY_FORM = factory.FACTORY_FORM[:-1] + " or 'demo')"


def _named() -> dict[str, Callable]:
    from opbridge.demo import build_demo

    return {"demo": build_demo}


def load_factory(text: str, argument: str = "model") -> Callable[[], tuple]:
    """The function named by ``path/to/file.py:function``, or the demo's for
    ``demo``; errors name ``argument`` (the command-line argument it came from)."""
    return factory.load_factory(text, argument, _named())


def build_model(text: str, argument: str = "model"):
    """``(model, example_inputs)`` from the factory ``text`` names (see
    :func:`opbridge.sdk.factory.build_model`); ``demo`` is the demo model."""
    return factory.build_model(text, argument, _named())


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=f"the model: {FACTORY_FORM}")


def add_import_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a Python module first (repeatable): an operator library's module loads "
        "its library and registers its cards when imported",
    )


def import_modules(names: list[str]) -> None:
    """Imports each module (from sys.path or the current directory); a
    FactoryError naming ``--import``, the module and what went wrong when one
    fails (not found, or an error raised while importing it, such as its
    library failing to load)."""
    if names and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if (
                error.name is not None
                and name != error.name
                and not name.startswith(error.name + ".")
            ):
                raise FactoryError(
                    f"--import {name}: importing it failed: {type(error).__name__}: {error}"
                ) from error
            raise FactoryError(
                f"--import {name}: no module named {error.name or name!r} (searched sys.path and "
                f"the current directory, {os.getcwd()}): install the operator library's package "
                "or run from the folder that holds the module"
            ) from error
        except Exception as error:  # the module's own code failed: say which module
            raise FactoryError(
                f"--import {name}: importing it failed: {type(error).__name__}: {error}"
            ) from error


# The runtime's advice for a model whose custom domain no loaded library
# provides, and what it becomes on the command line.
_LOAD_ADVICE = "opbridge.load_library(path)"
_IMPORT_ADVICE = "--import MODULE (the Python module of the operator library, which loads it)"


def require_libraries(model) -> list:
    """The loaded operator libraries the ONNX model ``model`` (a path or a
    ``ModelProto``) needs; a FactoryError when a domain it uses has no
    loaded library, saying that ``--import`` loads one."""
    from opbridge.runtimes.model import libraries_for

    try:
        return libraries_for(model)
    except RuntimeError as error:
        text = str(error)
        if _LOAD_ADVICE not in text:
            raise
        raise FactoryError(text.replace(_LOAD_ADVICE, _IMPORT_ADVICE)) from error


def add_route_argument(parser: argparse.ArgumentParser, help: str, required: bool = False) -> None:
    from opbridge.export import routes

    parser.add_argument(
        "--route", choices=routes.choices(), default=None, required=required, help=help
    )


def add_runtime_argument(parser: argparse.ArgumentParser) -> None:
    from opbridge import runtimes

    parser.add_argument(
        "--runtime",
        choices=runtimes.names(),
        default=runtimes.DEFAULT,
        help=f"the runtime to run the model in (default {runtimes.DEFAULT})",
    )


def add_opset_argument(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--opset", type=int, default=None, help=help)


def add_legacy_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--legacy", action="store_true", help="export with the TorchScript exporter (dynamo=False)"
    )


def add_batch_arguments(parser: argparse.ArgumentParser, dynamic: bool) -> None:
    """``--dynamic-batch`` and ``--static-batch``, one or the other, into
    ``args.dynamic_batch``; ``dynamic`` is the command's default."""
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument(
        "--dynamic-batch",
        dest="dynamic_batch",
        action="store_true",
        help="export with a dynamic batch dimension (dimension 0)"
        + (" (the default)" if dynamic else ""),
    )
    batch.add_argument(
        "--static-batch",
        dest="dynamic_batch",
        action="store_false",
        help="export with the example's batch size fixed" + ("" if dynamic else " (the default)"),
    )
    parser.set_defaults(dynamic_batch=dynamic)


def add_dynamic_sequence_argument(parser: argparse.ArgumentParser, help: str = "") -> None:
    """``--dynamic-sequence``; ``help`` adds what the command does with it."""
    parser.add_argument(
        "--dynamic-sequence",
        action="store_true",
        help="export with dimension 1 of every input of two or more dimensions dynamic too"
        + (f", {help}" if help else ""),
    )


def add_threads_argument(parser: argparse.ArgumentParser, help: str, several: bool = False) -> None:
    """``--threads``: one count, or ``several`` (``--threads 1 4``)."""
    parser.add_argument(
        "--threads", type=int, nargs="+" if several else None, default=None, help=help
    )


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values
