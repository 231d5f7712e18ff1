"""``opbridge.compile``: torch.compile of a model with opbridge's operators,
each operator either called as its kernel or decomposed for inductor.

Under ``torch.compile`` an operator of a library is opaque to inductor: the
generated code calls the kernel, and the pointwise work around it (a
matrix product's epilogue, the residual add, the next norm's input) cannot
fuse into it. The composite twin of a model (every operator written as its
card's ``composite``) gives inductor that freedom, and on matrix-product
bound models it can be faster than the fused kernels. So each operator gets
a choice, by the card's qualified name:

- ``"kernel"``: the graph calls ``torch.ops.<ns>.<op>.default`` (what plain
  ``torch.compile`` does).
- ``"decompose"``: inductor sees the card's ``composite`` in its place
  (registered in this compilation's decomposition table only: eager calls,
  autograd, ``torch.export`` and every other compilation still call the
  kernel). The backward, when there is one, stays opbridge's backward kernel.

``ops="auto"`` chooses per operator by measurement on the caller's model and
inputs (:func:`choose`), as ``route="auto"`` does for ONNX
(:mod:`opbridge.autoroute`):

1. records the calls of every operator that has a card (its shapes, dtypes
   and attributes); an operator whose card has no ``composite`` stays a
   kernel;
2. checks each operator's composite against its kernel on those calls
   within the dtype's tolerance (:data:`opbridge.sdk.testing.TOLERANCES`): an
   operator whose composite does not match is never decomposed;
3. compiles the whole model with every operator as a kernel, then, operator
   by operator (in the order the model first calls them), with that one
   decomposed as well, and keeps it decomposed when the whole model is faster
   (median of interleaved rounds of timed calls under ``torch.no_grad``, by
   at least ``margin``):
   what decomposing buys is fusion with the model's other operations, so it
   is measured in the model, not on the operator alone;
4. checks the chosen compilation's output against the eager model within the
   tolerance of the output's dtype.

The choice is deterministic given the timings and reproducible by passing
``ops=choice.plan``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from opbridge._schema import schema_order
from opbridge.ops import Card, cards
from opbridge.ops.calls import Call, record_calls

KERNEL = "kernel"
DECOMPOSE = "decompose"
AUTO = "auto"
CHOICES = (KERNEL, DECOMPOSE)

# Whole-model timing of each candidate in choose(): rounds, each with
# WARMUP untimed calls and CALLS timed ones of every candidate in turn.
ROUNDS = 5
WARMUP = 2
CALLS = 5
# A decomposition is kept when the model is at least this much faster with it.
MARGIN = 0.02

# timer({decomposed operators: call}) -> {decomposed operators: milliseconds per call}
Timer = Callable[[dict[tuple[str, ...], Callable[[], object]]], dict[tuple[str, ...], float]]


def _overload(found: Card) -> torch._ops.OpOverload:
    return getattr(getattr(torch.ops, found.namespace), found.name).default


def _positional(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple:
    """``args`` and ``kwargs`` of a call of ``op`` as positional arguments in
    its schema's order (a card's composite takes the call's signature, but
    not necessarily its argument names), defaults filled in."""
    if not kwargs:
        return tuple(args)

    def missing(name: str) -> Exception:
        return TypeError(f"opbridge.compile: {op} called without argument {name!r}")

    return tuple(schema_order(op._schema.arguments, args, kwargs, missing))


def decomposition(found: Card) -> Callable:
    """The card's ``composite`` as a decomposition of its operator's default
    overload (positional arguments in the schema's order)."""
    if found.composite is None:
        raise ValueError(
            f"opbridge.compile: operator {found.qualified_name} cannot be decomposed: its card "
            f"({found.origin or '?'}) has no composite"
        )
    op, composite = _overload(found), found.composite

    def decompose(*args, **kwargs):
        return composite(*_positional(op, args, kwargs))

    decompose.__name__ = f"decompose_{found.name}"
    return decompose


def _card_of(name: str) -> Card:
    known = cards()
    qualified = name if "::" in name else f"opbridge::{name}"
    if qualified not in known:
        raise ValueError(
            f"opbridge.compile: no card for operator {name!r}; known: {', '.join(known)} "
            "(an operator of another library registers its card with "
            "opbridge.ops.register_card)"
        )
    return known[qualified]


def normalize_plan(ops: Mapping[str, str] | Iterable[str]) -> dict[str, str]:
    """``ops`` (a mapping op -> "kernel" | "decompose", or the operators to
    decompose) as ``{qualified name: choice}``; refuses unknown operators,
    choices and cards without a composite to decompose."""
    items = ops.items() if isinstance(ops, Mapping) else ((name, DECOMPOSE) for name in ops)
    plan = {}
    for name, choice in items:
        found = _card_of(name)
        if choice not in CHOICES:
            raise ValueError(
                f"opbridge.compile: operator {found.qualified_name}: expected one of {CHOICES}, "
                f"got {choice!r}"
            )
        if choice == DECOMPOSE:
            decomposition(found)  # refuses a card without a composite
        plan[found.qualified_name] = choice
    return plan


class InductorBackend:
    """A ``torch.compile`` backend: inductor, with the decompositions of the
    operators ``decompose`` names (qualified) added to its table for this
    compilation only."""

    def __init__(self, decompose: Iterable[str] = (), config_patches: dict | None = None):
        self.decompose = tuple(dict.fromkeys(_card_of(name).qualified_name for name in decompose))
        self.config_patches = config_patches

    def table(self) -> dict:
        from torch._inductor.decomposition import select_decomp_table

        table = dict(select_decomp_table())
        for name in self.decompose:
            found = _card_of(name)
            table[_overload(found)] = decomposition(found)
        return table

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(
            graph_module,
            example_inputs,
            config_patches=self.config_patches,
            decompositions=self.table(),
        )

    def __repr__(self) -> str:
        return f"InductorBackend(decompose={list(self.decompose)})"


@dataclass
class Candidate:
    """One measured compilation: the operators decomposed in it, its median
    time per call, the median of the compilation it was tried against (the
    best so far, timed in the same interleaved rounds; None for the first),
    and whether it was kept in the end."""

    decomposed: tuple[str, ...]
    median_ms: float
    against_ms: float | None = None
    kept: bool = False


@dataclass
class CompileChoice:
    """The choice per operator (``plan``), why (``checks``: each operator's
    composite against its kernel; ``candidates``: the compilations timed),
    and the chosen compilation's largest difference from the eager model."""

    plan: dict[str, str]
    checks: dict[str, str] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    max_abs_diff: float | None = None

    @property
    def decomposed(self) -> list[str]:
        return [op for op, choice in self.plan.items() if choice == DECOMPOSE]

    def table(self) -> str:
        lines = ["operators:"]
        lines += [f"  {op}: {self.plan[op]} ({check})" for op, check in self.checks.items()]
        lines.append(
            "compilations timed (decomposed operators: median ms per call, and the best "
            "so far's in the same rounds):"
        )
        for c in self.candidates:
            what = ", ".join(c.decomposed) or "none"
            against = "" if c.against_ms is None else f" vs {c.against_ms:.3f}"
            lines.append(f"  {what}: {c.median_ms:.3f}{against}{'  <== kept' if c.kept else ''}")
        if self.max_abs_diff is not None:
            lines.append(f"max abs diff from eager: {self.max_abs_diff:.2e}")
        return "\n".join(lines)


def tolerance(dtype: torch.dtype) -> float:
    """atol = rtol a decomposed operator (and the compiled model) must keep
    to at ``dtype``: :data:`opbridge.sdk.testing.TOLERANCES`'."""
    from opbridge.sdk.testing import TOLERANCES

    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    return []


def _mismatch(actual, expected) -> str | None:
    """Why ``actual`` is not ``expected`` within the dtype's tolerance
    (tensor by tensor), or None when it is."""
    got, want = _tensors(actual), _tensors(expected)
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (a, e) in enumerate(zip(got, want, strict=True)):
        tol = tolerance(e.dtype)
        try:
            torch.testing.assert_close(a, e, atol=tol, rtol=tol)
        except AssertionError as error:
            return f"output {i}: {str(error).strip().splitlines()[0]} (atol = rtol = {tol:g})"
    return None


def check_composite(found: Card, calls: list[Call]) -> str | None:
    """Why the card's composite does not compute its kernel's result on
    ``calls`` within tolerance, or None when it does."""
    op, decompose = _overload(found), decomposition(found)
    with torch.no_grad():
        for call in calls:
            try:
                got = decompose(*call.args, **call.kwargs)
            except Exception as error:
                return f"the composite failed on {call.signature()}: {type(error).__name__}"
            why = _mismatch(got, op(*call.args, **call.kwargs))
            if why:
                return f"the composite differs from the kernel on {call.signature()}: {why}"
    return None


def interleaved_timer(rounds: int = ROUNDS, warmup: int = WARMUP, calls: int = CALLS) -> Timer:
    """Times candidates in interleaved rounds (each: ``warmup`` untimed
    calls, then ``calls`` timed ones, of every candidate in turn): each
    candidate's median over all its timed calls, in milliseconds. Interleaved,
    so that other load on the machine falls on every candidate alike."""

    def timer(fns: dict) -> dict:
        times: dict = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                for _ in range(warmup):
                    fn()
                for _ in range(calls):
                    start = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - start)
        return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}

    return timer


def _compiled(model, decompose, dynamic, fullgraph, config_patches):
    return torch.compile(
        model,
        backend=InductorBackend(decompose, config_patches),
        dynamic=dynamic,
        fullgraph=fullgraph,
    )


def carded_calls(model: torch.nn.Module, args: tuple) -> dict[str, list[Call]]:
    """The distinct calls ``model(*args)`` makes of operators with a card, by
    qualified name (in the order first called)."""
    known = cards()
    namespaces = {c.namespace for c in known.values()}
    by_op = record_calls(model, args, namespaces=namespaces)
    return {op: calls for op, calls in by_op.items() if op in known}


def choose(
    model: torch.nn.Module,
    args: Any,
    *,
    timer: Timer | None = None,
    margin: float = MARGIN,
    dynamic: bool | None = False,
    fullgraph: bool = False,
    config_patches: dict | None = None,
) -> CompileChoice:
    """Chooses kernel or decomposition per operator of ``model`` on ``args``
    (see the module's documentation). ``timer({decomposed: fn})`` replaces
    the timing (:func:`interleaved_timer`): it gets each candidate's call by
    the tuple of operators it decomposes and returns milliseconds per call.
    Compiles ``1 + n`` times for ``n`` operators that may be decomposed,
    after ``torch._dynamo.reset()`` (each compilation adds an entry to the
    model's compiled-code cache, whose size dynamo limits)."""
    return _choose(model, args, timer, margin, dynamic, fullgraph, config_patches)[0]


def _choose(model, args, timer, margin, dynamic, fullgraph, config_patches):
    """:func:`choose`'s choice, and the chosen compilation (compiled)."""
    args = (args,) if isinstance(args, torch.Tensor) else tuple(args)
    timer = timer or interleaved_timer()
    by_op = carded_calls(model, args)
    known = cards()
    choice = CompileChoice(plan={op: KERNEL for op in by_op})
    decomposable = []
    for op, calls in by_op.items():
        found = known[op]
        if found.composite is None:
            choice.checks[op] = "no composite in its card"
            continue
        why = check_composite(found, calls)
        if why:
            choice.checks[op] = why
            continue
        choice.checks[op] = "composite matches the kernel"
        decomposable.append(op)

    def compiled(decompose: tuple[str, ...]):
        fn = _compiled(model, decompose, dynamic, fullgraph, config_patches)
        fn(*args)  # compiles
        return fn

    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(*args)
        best_ops: tuple[str, ...] = ()
        best = compiled(best_ops)
        for op in decomposable:
            trial_ops = (*best_ops, op)
            trial = compiled(trial_ops)
            times = timer(
                {
                    best_ops: lambda fn=best: fn(*args),
                    trial_ops: lambda fn=trial: fn(*args),
                }
            )
            if not choice.candidates:
                choice.candidates.append(Candidate(best_ops, times[best_ops], kept=True))
            candidate = Candidate(trial_ops, times[trial_ops], times[best_ops])
            choice.candidates.append(candidate)
            if times[trial_ops] < (1 - margin) * times[best_ops]:
                for c in choice.candidates:
                    c.kept = False
                candidate.kept = True
                best_ops, best = trial_ops, trial
        for op in best_ops:
            choice.plan[op] = DECOMPOSE
        got = best(*args)
    why = _mismatch(got, expected)
    choice.max_abs_diff = max(
        (
            float((a.double() - e.double()).abs().max())
            for a, e in zip(_tensors(got), _tensors(expected), strict=True)
        ),
        default=0.0,
    )
    if why:
        raise RuntimeError(
            f"opbridge.compile: the model compiled with {', '.join(best_ops) or 'kernels only'} "
            f"decomposed differs from eager: {why}"
        )
    return choice, best


def compile(
    model: torch.nn.Module,
    example_inputs: Any = None,
    *,
    ops: str | Mapping[str, str] | Iterable[str] = AUTO,
    dynamic: bool | None = False,
    fullgraph: bool = False,
    config_patches: dict | None = None,
    timer: Timer | None = None,
):
    """``torch.compile(model)`` with inductor, where each operator that has
    a card (opbridge's, or one registered with
    :func:`opbridge.ops.register_card`) is either called as its kernel or
    handed to inductor as its card's ``composite``, which inductor can fuse
    with the operations around it (:mod:`opbridge.compiling`).

    ``ops``:

    - ``"auto"`` (default): measured on ``model(*example_inputs)``: every
      operator whose composite matches its kernel within the dtype's
      tolerance is tried decomposed, one after another, in the whole compiled
      model, and stays decomposed where the model is faster (see
      :func:`opbridge.compiling.choose`; ``timer`` replaces its timing). The
      choice (a :class:`opbridge.compiling.CompileChoice`: ``plan``,
      ``table()``) is the returned module's ``opbridge_compile_choice``.
    - ``"kernel"``: every operator called as its kernel (plain
      ``torch.compile``).
    - ``"decompose"``: every operator the model calls on ``example_inputs``
      whose card has a composite (no timing, no check).
    - a mapping ``{op: "kernel" | "decompose"}`` (a choice's ``plan``) or
      the operators to decompose, by name (``"rms_norm"``,
      ``"myops::my_op"``).

    ``dynamic`` and ``fullgraph`` are ``torch.compile``'s; ``config_patches``
    inductor's. The decompositions are in this compilation's table only:
    eager calls of ``model``, autograd's backward (still the operators'
    backward kernels), ``torch.export`` and other compilations are unchanged.
    """
    if isinstance(ops, str) and ops in (AUTO, DECOMPOSE):
        if example_inputs is None:
            raise ValueError(
                f'opbridge.compile: ops="{ops}" needs example_inputs (the model\'s operators '
                "are found by calling it)"
            )
        args = (
            (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
        )
        if ops == AUTO:
            choice, compiled = _choose(
                model, args, timer, MARGIN, dynamic, fullgraph, config_patches
            )
            compiled.opbridge_compile_choice = choice
            return compiled
        else:
            decompose = [op for op in carded_calls(model, args) if _card_of(op).composite]
    elif isinstance(ops, str):
        if ops != KERNEL:
            raise ValueError(
                f"opbridge.compile: ops: expected {AUTO!r}, {KERNEL!r}, {DECOMPOSE!r}, a mapping "
                f"of operators to {CHOICES} or the operators to decompose; got {ops!r}"
            )
        decompose = []
    else:
        decompose = [op for op, c in normalize_plan(ops).items() if c == DECOMPOSE]
    compiled = _compiled(model, decompose, dynamic, fullgraph, config_patches)
    compiled.opbridge_compile_choice = None
    return compiled
