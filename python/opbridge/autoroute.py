"""``route="auto"``: per operator, the fastest route that verifies.

For the user's model and example inputs, :func:`choose` records every call
of a library operator the model makes (its shapes, dtypes and attributes),
and for each operator and each candidate route (``custom``, ``standard`` and,
when the operator's card has one, ``ort``; ``custom`` left out when the model
must run without a custom-op library):

1. exports the operator's calls, one model per distinct call, by that route;
2. verifies each with :func:`opbridge.verify` (ONNX Runtime against PyTorch
   with graph optimizations off and on, the caller's tolerances or the
   defaults);
3. times each in the runtime (``runtime=``, default ONNX Runtime; its
   default optimization level, warm-up, median of repeated runs) at the
   model's shapes, weighted by how often the model makes that call.

The operator takes the fastest candidate that verified (ties go to the route
of the lowest :attr:`~opbridge.export.routes.Route.auto_rank`); a route that
fails to export or to verify is never chosen. A route that is a candidate
for other operators but has no form of its own for this one (``ort`` for a
card without an ort form) is listed unmeasured ("no ort form") rather than
left out of the table.
Timing each operator apart keeps the choice about the operator: in a
whole-model timing the matrix products' run-to-run noise can exceed an
operator's whole cost. The choice is deterministic given the timings, and
reproducible by exporting with ``route=choice.plan``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from opbridge import runtimes
from opbridge._library import library_for_namespace
from opbridge.export import ExportOptions, export, routes, set_route_resolver
from opbridge.ops.call import OpCall
from opbridge.ops.calls import Call, record_calls
from opbridge.verify import verify

WARMUP = runtimes.WARMUP
REPEATS = runtimes.REPEATS

# timer(op, route, model_bytes, feeds) -> milliseconds per run.
Timer = Callable[[str, str, bytes, dict], float]


@dataclass
class Candidate:
    op: str
    route: str
    verified: bool
    max_abs_err: float | None = None
    median_ms: float | None = None  # over the model's calls of the op, weighted by count
    detail: str = ""
    measured: bool = True  # False: not a candidate for this op (``detail`` says why)


@dataclass
class RouteChoice:
    """The route per operator (``plan``), and every candidate measured."""

    plan: dict[str, str]
    candidates: list[Candidate] = field(default_factory=list)
    calls: dict[str, list[str]] = field(default_factory=dict)  # op -> call signatures
    requires_library: bool = True
    # The operators the candidates were exported without (the runtime's
    # wrong forms and the caller's avoid): the export of the plan avoids them too.
    avoid: frozenset[str] = frozenset()

    def table(self) -> str:
        """The candidates (route, verified, max abs err, median ms) and the choice."""
        rows = [["op", "route", "verified", "max abs err", "median ms", "chosen"]]
        for c in self.candidates:
            rows.append(
                [
                    c.op,
                    c.route,
                    "yes"
                    if c.verified
                    else (f"no: {c.detail[:60]}" if c.measured else f"not measured: {c.detail}"),
                    "-" if c.max_abs_err is None else f"{c.max_abs_err:.2e}",
                    "-" if c.median_ms is None else f"{c.median_ms:.4f}",
                    "<==" if self.plan.get(c.op) == c.route else "",
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        choice = ", ".join(f"{op}: {route}" for op, route in self.plan.items()) or "no operators"
        lines.append(f"choice: {choice}")
        return "\n".join(line.rstrip() for line in lines)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _one_call(op: str, call: Call) -> OpCall:
    """One call of an operator as a model: its tensors are the inputs."""
    namespace, _, name = op.partition("::")
    return OpCall(getattr(getattr(torch.ops, namespace), name), call.args, call.kwargs)


def _candidate_routes(op: str, requires_library: bool) -> tuple[list[str], dict[str, str]]:
    """The routes measured for ``op``: every route that has a form of its
    own for the op's card (the ort route only with an ort form), without
    those that need a library when ``requires_library`` is False; and, by
    route, why a route that is a candidate for some operator is not one for
    ``op`` ("no ort form")."""
    from opbridge.ops import UnknownOperatorError, card, cards

    try:
        found = card(op)
    except UnknownOperatorError:
        found = None
    # An operator opbridge did not build has no runtime library to need.
    adopted = found is not None and library_for_namespace(found.namespace) is None
    usable = {
        name: route
        for name, route in routes.routes().items()
        if (requires_library and not adopted) or not route.needs_library
    }
    measured = [name for name, route in usable.items() if route.own_form(found)]
    known = list(cards().values())
    # A route with a form for no operator at all (the function route) is
    # never a candidate: nothing to say about it per operator.
    skipped = {
        name: f"no {name} form"
        for name, route in usable.items()
        if name not in measured and any(route.own_form(c) for c in known)
    }
    if adopted and requires_library:
        skipped.update(
            {
                name: "no runtime library (opbridge did not build the operator)"
                for name, route in routes.routes().items()
                if route.needs_library
            }
        )
    return measured, skipped


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _measure(
    op: str,
    route: str,
    calls: list[Call],
    opset,
    dynamo,
    timer: Timer,
    rtol,
    atol,
    runtime,
    avoid: frozenset[str] = frozenset(),
) -> Candidate:
    total_ms, worst = 0.0, 0.0
    for call in calls:
        module = _one_call(op, call).eval()
        inputs = tuple(call.args[p] for p in module.positions)
        try:
            proto = export(
                module, inputs, route=route, opset=opset, dynamo=dynamo, avoid=avoid, verbose=False
            )
        except Exception as error:
            return Candidate(op, route, False, detail=f"export failed: {_one_line(error)}")
        report = verify(
            module,
            inputs,
            onnx_model=proto,
            runtime=runtime,
            rtol=rtol,
            atol=atol,
            levels=[runtime.base_level, runtime.default_level],
            draws=1,
            layers=False,
        )
        if not report.passed:
            failures = report.failures()
            return Candidate(
                op,
                route,
                False,
                report.max_abs_err,
                detail="verification failed: " + (failures[0] if failures else "?"),
            )
        worst = max(worst, report.max_abs_err)
        names = [i.name for i in proto.graph.input]
        feeds = {n: t.numpy() for n, t in zip(names, inputs, strict=True)}
        total_ms += call.count * timer(op, route, proto.SerializeToString(), feeds)
    return Candidate(op, route, True, worst, total_ms)


def _rank(route: str) -> int:
    """Where ``route`` stands among candidates of equal time (its
    :attr:`~opbridge.export.routes.Route.auto_rank`, then registry order)."""
    return [found.name for found in routes.by_auto_rank()].index(route)


def _resolve(model: torch.nn.Module, args: Any, options: ExportOptions) -> RouteChoice:
    """``route="auto"`` for :func:`opbridge.export.export`."""
    return choose(model, args, options=options)


def choose(
    model: torch.nn.Module,
    args: Any,
    *,
    options: ExportOptions | None = None,
    runtime: str | runtimes.Runtime | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    timer: Timer | None = None,
    threads: int | None = None,
    **keywords: Any,
) -> RouteChoice:
    """Chooses a route per operator of ``model`` (see the module's documentation).

    ``options`` (:class:`opbridge.export.ExportOptions`, or its fields as
    keywords: ``opset``, ``dynamo``, ``requires_library``) says how the
    candidates are exported; ``requires_library=False`` leaves out the routes
    whose models need an operator library. ``runtime`` (a name of
    :func:`opbridge.runtimes.names`, default ONNX Runtime) verifies and times
    the candidates; ``timer(op, route, model_bytes, feeds) -> ms`` replaces
    its timing (``runtime.timer`` with ``threads``). Raises a RuntimeError
    naming the operator when no candidate route of an operator verifies.
    """
    settings = (options or ExportOptions()).merged(keywords, "opbridge.autoroute.choose")
    if keywords:
        raise TypeError(f"opbridge.autoroute.choose: unexpected keyword(s) {sorted(keywords)}")
    opset, dynamo, requires_library = settings.opset, settings.dynamo, settings.requires_library
    if isinstance(args, torch.Tensor):
        args = (args,)
    runtime = runtimes.get(runtime)
    timer = timer or runtime.timer(threads)
    by_op = record_calls(model, tuple(args))
    avoid = settings.avoid | runtime.avoid()
    choice = RouteChoice(plan={}, requires_library=requires_library, avoid=avoid)
    for op, calls in by_op.items():
        choice.calls[op] = [f"{c.signature()} x{c.count}" for c in calls]
        candidates, skipped = _candidate_routes(op, requires_library)
        measured = [
            _measure(op, route, calls, opset, dynamo, timer, rtol, atol, runtime, avoid)
            for route in candidates
        ]
        unmeasured = [
            Candidate(op, route, False, detail=why, measured=False)
            for route, why in skipped.items()
        ]
        choice.candidates += measured + unmeasured
        verified = [c for c in measured if c.verified]
        if not verified:
            reasons = "; ".join(f"{c.route}: {c.detail}" for c in measured + unmeasured)
            raise RuntimeError(f"opbridge: no route of {op} verifies for this model ({reasons})")
        best = min(verified, key=lambda c: (c.median_ms, _rank(c.route)))
        choice.plan[op] = best.route
    return choice


# route="auto": the second of the import-time effects the package's docstring lists.
set_route_resolver(routes.AUTO, _resolve)
