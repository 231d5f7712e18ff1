"""``opbridge verify``: PyTorch against ONNX Runtime, layer by layer, for a
model from a factory (``path/to/file.py:function``) or the built-in demo."""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

from opbridge.onnx import ROUTES

FACTORY_FORM = "'path/to/file.py:function' (a function returning (model, example_inputs)) or 'demo'"

HELP = "prove a model computes the same numbers in PyTorch and ONNX Runtime, layer by layer"


class FactoryError(ValueError):
    """A model factory that cannot be loaded or called."""


# (resolved path, mtime, size) -> the module loaded from that file
_LOADED: dict[tuple, object] = {}


def load_factory(text: str, argument: str = "model") -> Callable[[], tuple]:
    """The function named by ``path/to/file.py:function``, or the demo's for
    ``demo``; errors name ``argument`` (the command-line argument it came from)."""
    if text == "demo":
        from opbridge.demo import build_demo

        return build_demo
    path_text, sep, name = text.rpartition(":")
    if not sep or not path_text or not name:
        raise FactoryError(f"{argument}: expected {FACTORY_FORM}, got {text!r}")
    path = Path(path_text)
    if path.suffix != ".py":
        raise FactoryError(
            f"{argument}: expected a Python file before ':' in {FACTORY_FORM}, got {path_text!r}"
        )
    if not path.is_file():
        raise FactoryError(f"{argument}: the file {path_text!r} (from {text!r}) does not exist")
    if not name.isidentifier():
        raise FactoryError(f"{argument}: expected a function name after ':', got {name!r}")
    module_name = f"opbridge_model_{path.stem}"
    # A file loaded before and unchanged since (the model's file again, for
    # --reference) is the same module: its classes are the same, and its
    # top-level code runs once.
    stat = path.stat()
    key = (path.resolve(), stat.st_mtime_ns, stat.st_size)
    module = _LOADED.get(key)
    if module is None or sys.modules.get(module_name) is not module:
        module = _import_file(module_name, path, path_text, argument)
        _LOADED[key] = module
    factory = getattr(module, name, None)
    if not callable(factory):
        defined = sorted(
            key
            for key, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module_name
        )
        raise FactoryError(
            f"{argument}: {path_text!r} has no function {name!r} (it defines {defined or 'none'})"
        )
    return factory


def _import_file(module_name: str, path: Path, path_text: str, argument: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import would (dataclasses and pickling
    # look their module up there); its folder comes first so that it can
    # import its neighbours.
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise FactoryError(f"{argument}: importing {path_text!r} failed: {error!r}") from error
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def build_model(text: str, argument: str = "model"):
    """Calls the factory; returns ``(model, args)`` with ``args`` a tuple.
    Errors name ``argument`` (the command-line argument ``text`` came from)."""
    import torch

    factory = load_factory(text, argument)
    try:
        inspect.signature(factory).bind()
    except TypeError as error:
        raise FactoryError(
            f"{argument}: {text!r} must be callable without arguments ({error})"
        ) from error
    except ValueError:
        pass  # no signature to inspect (a builtin); calling it will tell
    built = factory()
    if not (isinstance(built, tuple | list) and len(built) == 2):
        raise FactoryError(
            f"{argument}: {text!r} must return (model, example_inputs), got {type(built).__name__}"
            + (f" of length {len(built)}" if isinstance(built, tuple | list) else "")
        )
    model, args = built
    if not isinstance(model, torch.nn.Module):
        raise FactoryError(
            f"{argument}: {text!r} returned {type(model).__name__} as the model; "
            "expected a torch.nn.Module"
        )
    if isinstance(args, torch.Tensor):
        args = (args,)
    elif isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple):
        raise FactoryError(
            f"{argument}: {text!r} returned {type(args).__name__} as example inputs; "
            "expected a tensor or a tuple of them"
        )
    return model, args


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=f"the model: {FACTORY_FORM}")
    parser.add_argument(
        "--reference",
        metavar="FACTORY",
        default=None,
        help=f"a reference model to agree with, {FACTORY_FORM}: built like the model, after "
        "torch.manual_seed(--seed) as the model is, so it must build the same weights (e.g. "
        "model.py:make_model for model.py:make_patched_model); its example inputs must have "
        "the model's shapes",
    )
    parser.add_argument(
        "--route",
        choices=ROUTES,
        default=None,
        help="the export route (required unless --onnx gives the model; then its metadata's)",
    )
    parser.add_argument(
        "--onnx", type=Path, default=None, help="verify this ONNX file as is instead of exporting"
    )
    parser.add_argument(
        "--rtol", type=float, default=None, help="default: 1e-7 for float64 outputs, else 1e-5"
    )
    parser.add_argument(
        "--atol", type=float, default=None, help="default: 1e-7 for float64 outputs, else 1e-5"
    )
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset for the export")
    parser.add_argument(
        "--legacy", action="store_true", help="export with the TorchScript exporter (dynamo=False)"
    )
    parser.add_argument(
        "--static-batch", action="store_true", help="export without a dynamic batch dimension"
    )
    parser.add_argument(
        "--dynamic-sequence",
        action="store_true",
        help="export with dimension 1 of every input of 2+ dimensions dynamic too, and sweep it",
    )
    parser.add_argument(
        "--sequence-lengths",
        type=_int_list,
        default=None,
        help="sequence lengths to sweep, e.g. 8,32 (default: the example's and twice it)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=_int_list,
        default=None,
        help="batch sizes to sweep, e.g. 1,4,64 (default: 1, the export batch and a large one)",
    )
    parser.add_argument(
        "--draws", type=int, default=3, help="input sets at the export batch (example + random)"
    )
    parser.add_argument(
        "--inputs",
        type=Path,
        action="append",
        default=None,
        help=".npz of inputs (keyed by ONNX input name, or arr_0, arr_1, ...) to use "
        "instead of random draws; repeatable",
    )
    parser.add_argument(
        "--levels", default=None, help="optimization levels, comma-separated (default: all)"
    )
    parser.add_argument("--no-layers", action="store_true", help="skip layer by layer")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="torch.manual_seed before building the model (and the reference), and the seed "
        "of the random input draws",
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="write the whole report as JSON to FILE (or to stdout instead of the table)",
    )
    parser.add_argument("--plot", type=Path, default=None, help="write per-layer error as PNG")
    parser.add_argument("--save-onnx", type=Path, default=None, help="write the verified model")


def run(args: argparse.Namespace) -> int:
    import torch

    from opbridge.verify import verify

    try:
        torch.manual_seed(args.seed)
        model, example = build_model(args.model)
        reference = None
        if args.reference is not None:
            torch.manual_seed(args.seed)
            reference, reference_example = build_model(args.reference, "--reference")
            _check_same_inputs(args, example, reference_example)
    except FactoryError as error:
        print(f"opbridge verify: error: {error}", file=sys.stderr)
        return 2
    if args.route is None and args.onnx is None:
        print(
            f"opbridge verify: error: --route is required to export the model (one of "
            f"{', '.join(ROUTES)}), or --onnx to verify a saved model",
            file=sys.stderr,
        )
        return 2
    try:
        report = verify(
            model,
            example,
            onnx_model=args.onnx,
            route=args.route,
            reference=reference,
            rtol=args.rtol,
            atol=args.atol,
            opset=args.opset,
            dynamo=not args.legacy,
            dynamic_batch=not args.static_batch,
            dynamic_sequence=args.dynamic_sequence,
            batch_sizes=args.batch_sizes,
            sequence_lengths=args.sequence_lengths,
            draws=args.draws,
            inputs=args.inputs,
            levels=args.levels.split(",") if args.levels else None,
            layers=not args.no_layers,
            seed=args.seed,
        )
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"opbridge verify: error: {error}", file=sys.stderr)
        return 2
    if reference is not None:
        report.reference = (
            f"{args.reference}, a {type(reference).__name__} built with seed {args.seed}"
        )
    if args.save_onnx is not None:
        import onnx

        onnx.save(report.onnx_model, args.save_onnx)
    if args.json == "-":
        print(report.to_json())
    else:
        print(report.format())
        if args.json is not None:
            Path(args.json).write_text(report.to_json() + "\n")
    if args.plot is not None:
        report.plot(args.plot)
    return 0 if report.passed else 1


def _check_same_inputs(args: argparse.Namespace, example: tuple, reference_example: tuple) -> None:
    """The reference factory's example inputs must be shaped like the model's
    (the model's are the ones used)."""
    from opbridge.verify.sweeps import leaves

    def shapes(inputs: tuple) -> list[str]:
        return [f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in leaves(inputs)]

    if shapes(example) != shapes(reference_example):
        raise FactoryError(
            f"--reference: {args.reference!r} returned example inputs "
            f"{shapes(reference_example)}; expected the model's ({args.model!r}): "
            f"{shapes(example)}"
        )
