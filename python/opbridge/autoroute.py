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
listed first in ``PREFERENCE``); a route that fails to export or to verify is
never chosen. Timing each operator apart keeps the choice about the operator:
in a whole-model timing the matrix products' run-to-run noise can exceed an
operator's whole cost. The choice is deterministic given the timings, and
reproducible by exporting with ``route=choice.plan``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from opbridge import runtimes
from opbridge._library import libraries
from opbridge.export import ExportOptions, export, routes, set_route_resolver
from opbridge.ops.call import OpCall
from opbridge.verify import verify

# Tie-break order between candidates of equal time.
PREFERENCE = ("custom", "ort", "standard")
WARMUP = runtimes.WARMUP
REPEATS = runtimes.REPEATS

# timer(op, route, model_bytes, feeds) -> milliseconds per run.
Timer = Callable[[str, str, bytes, dict], float]


@dataclass
class Call:
    """One distinct call of an operator in the model, and how often it is made."""

    op: str  # "<namespace>::<name>"
    args: tuple
    kwargs: dict
    count: int = 1

    def signature(self) -> str:
        def text(value):
            if isinstance(value, torch.Tensor):
                return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
            return repr(value)

        parts = [text(a) for a in self.args] + [f"{k}={text(v)}" for k, v in self.kwargs.items()]
        return f"({', '.join(parts)})"


@dataclass
class Candidate:
    op: str
    route: str
    verified: bool
    max_abs_err: float | None = None
    median_ms: float | None = None  # over the model's calls of the op, weighted by count
    detail: str = ""


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
                    "yes" if c.verified else f"no: {c.detail[:60]}",
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


class _Recorder(TorchDispatchMode):
    """Records each call of a library operator (one entry per distinct call)."""

    def __init__(self, namespaces: set[str]):
        super().__init__()
        self.namespaces = namespaces
        self.calls: dict[tuple, Call] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        namespace = getattr(func, "namespace", "")
        if namespace in self.namespaces:
            op = f"{namespace}::{func._schema.name.split('::')[-1]}"
            call = Call(op, _detached(args), _detached(kwargs))
            key = (op, call.signature())
            if key in self.calls:
                self.calls[key].count += 1
            else:
                self.calls[key] = call
        return func(*args, **kwargs)


def _detached(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple | list):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def record_calls(model: torch.nn.Module, args: tuple) -> dict[str, list[Call]]:
    """The distinct calls of every loaded library's operators that
    ``model(*args)`` makes, by operator (in the order first called)."""
    recorder = _Recorder({lib.torch_namespace for lib in libraries()})
    with torch.no_grad(), recorder:
        model(*args)
    by_op: dict[str, list[Call]] = {}
    for call in recorder.calls.values():
        by_op.setdefault(call.op, []).append(call)
    return by_op


def _one_call(op: str, call: Call) -> OpCall:
    """One call of an operator as a model: its tensors are the inputs."""
    namespace, _, name = op.partition("::")
    return OpCall(getattr(getattr(torch.ops, namespace), name), call.args, call.kwargs)


def _candidate_routes(op: str, requires_library: bool) -> list[str]:
    """The routes measured for ``op``: every route that has a form of its
    own for the op's card (the ort route only with an ort form), without
    those that need a library when ``requires_library`` is False."""
    from opbridge.ops import UnknownOperatorError, card

    try:
        found = card(op)
    except UnknownOperatorError:
        found = None
    return [
        name
        for name, route in routes.routes().items()
        if route.own_form(found) and (requires_library or not route.needs_library)
    ]


def ort_timer(threads: int | None = None) -> Timer:
    """Times a model in ONNX Runtime (all graph optimizations; ``threads``
    intra-op threads, default ONNX Runtime's): the median of ``REPEATS`` runs
    after ``WARMUP``, in milliseconds."""
    return runtimes.get("onnxruntime").timer(threads)


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


def _preference(route: str) -> int:
    order = list(dict.fromkeys([*PREFERENCE, *routes.names()]))
    return order.index(route)


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
        measured = [
            _measure(op, route, calls, opset, dynamo, timer, rtol, atol, runtime, avoid)
            for route in _candidate_routes(op, requires_library)
        ]
        choice.candidates += measured
        verified = [c for c in measured if c.verified]
        if not verified:
            reasons = "; ".join(f"{c.route}: {c.detail}" for c in measured)
            raise RuntimeError(f"opbridge: no route of {op} verifies for this model ({reasons})")
        best = min(verified, key=lambda c: (c.median_ms, _preference(c.route)))
        choice.plan[op] = best.route
    return choice


set_route_resolver(routes.AUTO, _resolve)
