"""``opbridge verify``: PyTorch against a runtime (ONNX Runtime by default),
layer by layer, for a model from a factory (``path/to/file.py:function``) or
the built-in demo."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opbridge.cli.common import (
    FACTORY_FORM,
    FactoryError,
    add_batch_arguments,
    add_dynamic_sequence_argument,
    add_import_argument,
    add_legacy_argument,
    add_model_argument,
    add_opset_argument,
    add_route_argument,
    add_runtime_argument,
    build_model,
    import_modules,
    int_list,
    require_libraries,
)
from opbridge.export import routes

HELP = "prove a model computes the same numbers in PyTorch and a runtime, layer by layer"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_import_argument(parser)
    parser.add_argument(
        "--reference",
        metavar="FACTORY",
        default=None,
        help=f"a reference model to agree with, {FACTORY_FORM}: built like the model, after "
        "torch.manual_seed(--seed) as the model is, so it must build the same weights (e.g. "
        "model.py:make_model for model.py:make_patched_model); its example inputs must have "
        "the model's shapes",
    )
    add_route_argument(
        parser, "the export route (required unless --onnx gives the model; then its metadata's)"
    )
    add_runtime_argument(parser)
    parser.add_argument(
        "--onnx", type=Path, default=None, help="verify this ONNX file as is instead of exporting"
    )
    parser.add_argument(
        "--rtol", type=float, default=None, help="default: 1e-7 for float64 outputs, else 1e-5"
    )
    parser.add_argument(
        "--atol", type=float, default=None, help="default: 1e-7 for float64 outputs, else 1e-5"
    )
    add_opset_argument(parser, "ONNX opset for the export")
    add_legacy_argument(parser)
    add_batch_arguments(parser, dynamic=True)
    add_dynamic_sequence_argument(parser, "and sweep it")
    parser.add_argument(
        "--sequence-lengths",
        type=int_list,
        default=None,
        help="sequence lengths to sweep, e.g. 8,32 (default: the example's and twice it)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=int_list,
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
        import_modules(args.imports)
        if args.onnx is not None:
            require_libraries(args.onnx)
        torch.manual_seed(args.seed)
        model, example = build_model(args.model)
        reference = None
        if args.reference is not None:
            torch.manual_seed(args.seed)
            reference, reference_example = build_model(args.reference, "--reference")
            _check_same_inputs(args, example, reference_example)
    except (FactoryError, FileNotFoundError, ValueError) as error:
        print(f"opbridge verify: error: {error}", file=sys.stderr)
        return 2
    if args.route is None and args.onnx is None:
        print(
            f"opbridge verify: error: --route is required to export the model (one of "
            f"{', '.join(routes.choices())}), or --onnx to verify a saved model",
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
            dynamic_batch=args.dynamic_batch,
            dynamic_sequence=args.dynamic_sequence,
            batch_sizes=args.batch_sizes,
            sequence_lengths=args.sequence_lengths,
            draws=args.draws,
            inputs=args.inputs,
            levels=args.levels.split(",") if args.levels else None,
            layers=not args.no_layers,
            seed=args.seed,
            runtime=args.runtime,
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
