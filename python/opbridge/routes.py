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
3. times each in ONNX Runtime (all optimizations, warm-up, median of repeated
   runs) at the model's shapes, weighted by how often the model makes that
   call.

The operator takes the fastest candidate that verified (ties go to the route
listed first in ``PREFERENCE``); a route that fails to export or to verify is
never chosen. Timing each operator apart keeps the choice about the operator:
in a whole-model timing the matrix products' run-to-run noise can exceed an
operator's whole cost. The choice is deterministic given the timings, and
reproducible by exporting with ``route=choice.plan``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from opbridge._library import libraries
from opbridge.onnx import LIBRARY_FREE_ROUTES, OP_ROUTES

# Tie-break order between candidates of equal time.
PREFERENCE = ("custom", "ort", "standard")
WARMUP = 3
REPEATS = 15

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


def _one_call(op: str, call: Call) -> torch.nn.Module:
    """One call of an operator as a model: its tensors are the inputs."""
    from opbridge.testing import _OneOp

    namespace, _, name = op.partition("::")
    return _OneOp(getattr(getattr(torch.ops, namespace), name), call.args, call.kwargs)


def _candidate_routes(op: str, requires_library: bool) -> list[str]:
    from opbridge.ops import UnknownOperatorError, card

    try:
        has_ort = card(op).ort is not None
    except UnknownOperatorError:
        has_ort = False
    routes = [r for r in OP_ROUTES if r != "ort" or has_ort]
    if not requires_library:
        routes = [r for r in routes if r in LIBRARY_FREE_ROUTES]
    return routes


def ort_timer(threads: int | None = None) -> Timer:
    """Times a model in ONNX Runtime (all graph optimizations; ``threads``
    intra-op threads, default ONNX Runtime's): the median of ``REPEATS`` runs
    after ``WARMUP``, in milliseconds."""
    import time

    from opbridge.ort import InferenceSession

    def timer(op: str, route: str, model: bytes, feeds: dict) -> float:
        session = InferenceSession(model, optimization_level="enable_all", threads=threads)
        for _ in range(WARMUP):
            session.run(None, feeds)
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter_ns()
            session.run(None, feeds)
            times.append((time.perf_counter_ns() - start) / 1e6)
        return statistics.median(times)

    return timer


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _measure(
    op: str, route: str, calls: list[Call], opset, dynamo, timer: Timer, rtol, atol
) -> Candidate:
    from opbridge.onnx import export
    from opbridge.verify import verify

    total_ms, worst = 0.0, 0.0
    for call in calls:
        module = _one_call(op, call).eval()
        inputs = tuple(call.args[p] for p in module.positions)
        try:
            proto = export(module, inputs, route=route, opset=opset, dynamo=dynamo, verbose=False)
        except Exception as error:
            return Candidate(op, route, False, detail=f"export failed: {_one_line(error)}")
        report = verify(
            module,
            inputs,
            onnx_model=proto,
            rtol=rtol,
            atol=atol,
            levels=["disable_all", "enable_all"],
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


def choose(
    model: torch.nn.Module,
    args: Any,
    *,
    opset: int | None = None,
    dynamo: bool = True,
    requires_library: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    timer: Timer | None = None,
    threads: int | None = None,
) -> RouteChoice:
    """Chooses a route per operator of ``model`` (see the module's documentation).

    ``timer(op, route, model_bytes, feeds) -> ms`` replaces the ONNX Runtime
    timing (:func:`ort_timer` with ``threads``). Raises a RuntimeError naming
    the operator when no candidate route of an operator verifies.
    """
    if isinstance(args, torch.Tensor):
        args = (args,)
    timer = timer or ort_timer(threads)
    by_op = record_calls(model, tuple(args))
    choice = RouteChoice(plan={}, requires_library=requires_library)
    for op, calls in by_op.items():
        choice.calls[op] = [f"{c.signature()} x{c.count}" for c in calls]
        measured = [
            _measure(op, route, calls, opset, dynamo, timer, rtol, atol)
            for route in _candidate_routes(op, requires_library)
        ]
        choice.candidates += measured
        verified = [c for c in measured if c.verified]
        if not verified:
            reasons = "; ".join(f"{c.route}: {c.detail}" for c in measured)
            raise RuntimeError(f"opbridge: no route of {op} verifies for this model ({reasons})")
        best = min(verified, key=lambda c: (c.median_ms, PREFERENCE.index(c.route)))
        choice.plan[op] = best.route
    return choice
