"""``opbridge export``: a model from a factory (``path/to/file.py:function``)
to ONNX by a route; with ``--route auto`` the route of each operator is
chosen by measurement (:mod:`opbridge.routes`) and the table of candidates
is printed. The written model is then verified against PyTorch."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

HELP = "export a model to ONNX by a route (auto: the fastest route per operator that verifies)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from opbridge.onnx import DEFAULT_OPSET, ROUTES
    from opbridge.verify.cli import FACTORY_FORM

    parser.add_argument("model", help=f"the model: {FACTORY_FORM}")
    parser.add_argument("output", type=Path, help="where to write the ONNX model")
    parser.add_argument("--route", choices=ROUTES, required=True, help="see opbridge.onnx")
    parser.add_argument("--opset", type=int, default=None, help=f"default {DEFAULT_OPSET}")
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
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (auto)")
    parser.add_argument(
        "--json", type=Path, default=None, help="also write auto's candidates and choice as JSON"
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from opbridge.onnx import ExportError, dynamic_spec, export
    from opbridge.routes import choose
    from opbridge.verify import verify
    from opbridge.verify.cli import FactoryError, build_model

    if args.no_library and args.route == "custom":
        print("opbridge export: --no-library cannot take --route custom", file=sys.stderr)
        return 2
    try:
        model, example = build_model(args.model)
    except FactoryError as error:
        print(f"opbridge export: {error}", file=sys.stderr)
        return 2
    model.eval()
    route = args.route
    quiet = contextlib.redirect_stdout(io.StringIO())
    try:
        if route == "auto":
            with quiet:
                choice = choose(
                    model,
                    example,
                    opset=args.opset,
                    dynamo=not args.legacy,
                    requires_library=not args.no_library,
                    threads=args.threads,
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
            model, example, onnx_model=proto, levels=["disable_all", "enable_all"], layers=False
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
