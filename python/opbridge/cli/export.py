"""``opbridge export``: a model from a factory (``path/to/file.py:function``)
to ONNX by a route; with ``--route auto`` the route of each operator is
chosen by measurement (:mod:`opbridge.autoroute`) and the table of candidates
is printed. With ``--simplify`` the model is simplified
(:func:`opbridge.export.simplify.simplify`) and its node counts and latency
before and after are printed. The written model is then verified against
PyTorch."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

from opbridge.cli.common import (
    FactoryError,
    add_batch_arguments,
    add_dynamic_sequence_argument,
    add_import_argument,
    add_legacy_argument,
    add_model_argument,
    add_opset_argument,
    add_route_argument,
    add_runtime_argument,
    add_threads_argument,
    build_model,
    import_modules,
)
from opbridge.export import DEFAULT_OPSET
from opbridge.export.simplify import METADATA_SIMPLIFIED_KEY
from opbridge.runtimes import REPEATS, WARMUP, median_ms

# Latency before and after --simplify: the median of each model's runs, the
# two timed in alternating rounds so that a drift of the machine's speed
# falls on both.
LATENCY_ROUNDS = 5

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
    add_legacy_argument(parser)
    add_batch_arguments(parser, dynamic=False)
    add_dynamic_sequence_argument(parser)
    add_threads_argument(parser, "runtime threads (auto)")
    parser.add_argument(
        "--json", type=Path, default=None, help="also write auto's candidates and choice as JSON"
    )
    parser.add_argument(
        "--simplify",
        action="store_true",
        help="simplify the exported model (onnxsim; operator library nodes kept as exported), "
        "print node counts and latency before and after; the simplified model is verified",
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
            # An export for the runtime: without the forms it computes wrong.
            proto = export(
                model,
                example,
                route=route,
                opset=args.opset,
                dynamo=not args.legacy,
                avoid=runtime.avoid(),
                **dynamic,
            )
    except (ExportError, RuntimeError, ValueError) as error:
        print(f"opbridge export: {error}", file=sys.stderr)
        return 1
    import onnx

    if args.simplify:
        proto = _simplified(proto, example, runtime, args.threads)
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
    simplified = (
        ", simplified" if METADATA_SIMPLIFIED_KEY in {p.key for p in proto.metadata_props} else ""
    )
    print(
        f"wrote {args.output} (route {args.route}{simplified}); verification {status}: "
        f"max abs err {report.max_abs_err:.2e} over {len(report.cells)} runs"
    )
    if not report.passed:
        for line in report.failures():
            print(f"  {line}")
    return 0 if report.passed else 1


def _simplified(proto, example, runtime, threads):
    """The simplified model (or ``proto`` when it cannot be simplified, with
    the reason on stderr), with node counts and latency before and after
    printed."""
    import warnings

    from opbridge.export.simplify import SimplifyWarning, simplify

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SimplifyWarning)
        simplified, report = simplify(proto)
    if not report.simplified:
        print(
            f"opbridge export: --simplify: {report.reason}; writing the model as exported",
            file=sys.stderr,
        )
        return proto
    print(report.line())
    times = _latency(runtime, [proto, simplified], example, threads)
    if isinstance(times, str):
        print(f"latency: not measured ({times})")
    else:
        print(
            f"latency in {runtime.label} ({runtime.default_level}, median over "
            f"{LATENCY_ROUNDS} alternating rounds of {REPEATS} runs): {times[0]:.3f} ms as "
            f"exported, {times[1]:.3f} ms simplified"
        )
    return simplified


def _latency(runtime, models: list, example, threads) -> list[float] | str:
    """Each model's median latency in ms (sessions at the runtime's default
    level), or why it could not be measured."""
    import statistics

    import torch
    from torch.utils import _pytree as pytree

    tensors = [t for t in pytree.tree_leaves(example) if isinstance(t, torch.Tensor)]
    calls = []
    for model in models:
        try:
            session = runtime.session(
                model.SerializeToString(), level=runtime.default_level, threads=threads
            )
        except Exception as error:
            return f"{runtime.label} could not load a model: {error}"
        names = [i.name for i in session.get_inputs()]
        if len(names) != len(tensors):
            return f"the model takes {len(names)} inputs, the example has {len(tensors)} tensors"
        feeds = {name: t.detach().cpu().numpy() for name, t in zip(names, tensors, strict=True)}
        calls.append(lambda session=session, feeds=feeds: session.run(None, feeds))
    rounds: list[list[float]] = [[] for _ in models]
    for _ in range(LATENCY_ROUNDS):
        for times, call in zip(rounds, calls, strict=True):
            times.append(median_ms(call, warmup=1 if times else WARMUP, repeats=REPEATS))
    return [statistics.median(times) for times in rounds]
