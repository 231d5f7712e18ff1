"""``opbridge export``: a model from a factory (``path/to/file.py:function``)
to ONNX by a route; with ``--route auto`` the route of each operator is
chosen by measurement (:mod:`opbridge.autoroute`) and the table of candidates
is printed. The written model is then verified against PyTorch."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

from opbridge.cli.common import (
    FactoryError,
    add_import_argument,
    add_model_argument,
    add_opset_argument,
    add_route_argument,
    add_runtime_argument,
    build_model,
    import_modules,
)
from opbridge.export import DEFAULT_OPSET

HELP = "export a model to ONNX by a route (auto: the fastest route per operator that verifies)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("output", type=Path, help="where to write the ONNX model")
    add_route_argument(parser, "see opbridge.export", required=True)
    add_opset_argument(parser, f"default {DEFAULT_OPSET}")
    add_runtime_argument(parser)
    add_import_argument(parser)
    parser.add_argument(
        "--no-library",
        action="store_true",
        help="the model must run in a stock ONNX Runtime: auto leaves out the custom route",
    )
    parser.add_argument(
        "--legacy", action="store_true", help="the TorchScript exporter (dynamo=False)"
    )
    parser.add_argument(
        "--dynamic-batch", action="store_true", help="a dynamic batch dimension (dimension 0)"
    )
    parser.add_argument(
        "--dynamic-sequence",
        action="store_true",
        help="dimension 1 of every input of two or more dimensions dynamic too",
    )
    parser.add_argument("--threads", type=int, default=None, help="runtime threads (auto)")
    parser.add_argument(
        "--json", type=Path, default=None, help="also write auto's candidates and choice as JSON"
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from opbridge import runtimes
    from opbridge.autoroute import choose
    from opbridge.export import ExportError, dynamic_spec, export, routes
    from opbridge.verify import verify

    if args.no_library and args.route in routes.names() and routes.get(args.route).needs_library:
        print(f"opbridge export: --no-library cannot take --route {args.route}", file=sys.stderr)
        return 2
    runtime = runtimes.get(args.runtime)
    try:
        import_modules(args.imports)
        model, example = build_model(args.model)
    except FactoryError as error:
        print(f"opbridge export: {error}", file=sys.stderr)
        return 2
    model.eval()
    route = args.route
    quiet = contextlib.redirect_stdout(io.StringIO())
    try:
        if route == routes.AUTO:
            with quiet:
                choice = choose(
                    model,
                    example,
                    opset=args.opset,
                    dynamo=not args.legacy,
                    requires_library=not args.no_library,
                    threads=args.threads,
                    runtime=runtime,
                )
            print(choice.table())
            if args.json is not None:
                args.json.write_text(choice.to_json())
            route = choice
        dynamic = {"dynamic_batch": args.dynamic_batch}
        if args.dynamic_sequence:
            spec = dynamic_spec(
                example,
                None if args.legacy else model,
                batch=args.dynamic_batch,
                sequence=True,
            )
            dynamic = {"dynamic_shapes": spec}
        with quiet, torch.no_grad():
            proto = export(
                model, example, route=route, opset=args.opset, dynamo=not args.legacy, **dynamic
            )
    except (ExportError, RuntimeError, ValueError) as error:
        print(f"opbridge export: {error}", file=sys.stderr)
        return 1
    import onnx

    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, args.output)
    with quiet:
        report = verify(
            model,
            example,
            onnx_model=proto,
            runtime=runtime,
            levels=[runtime.base_level, runtime.default_level],
            layers=False,
        )
    status = "passed" if report.passed else "FAILED"
    print(
        f"wrote {args.output} (route {args.route}); verification {status}: "
        f"max abs err {report.max_abs_err:.2e} over {len(report.cells)} runs"
    )
    if not report.passed:
        for line in report.failures():
            print(f"  {line}")
    return 0 if report.passed else 1
