"""What a runtime is (:class:`Runtime`), apart from the registry of runtimes."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WARMUP = 3
REPEATS = 15


@dataclass
class RuntimeCheck:
    """One check ``opbridge doctor`` reports for a runtime."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Runtime:
    """One runtime.

    - ``session(model, level=None, threads=None)``: a session on ``model``
      (a path, bytes or ``ModelProto``) with every operator library it needs
      registered, at optimization ``level`` (None: the runtime's default) with
      ``threads`` intra-op threads (None: the runtime's default).
    - ``levels()``: the optimization levels it has, least to most.
    - ``base_level``: the level that runs the graph as exported (the others
      are compared with it); ``default_level``: what a deployed session uses.
    - ``version()``: the installed runtime's version.
    - ``library_path(library)``: the runtime's library of a loaded operator
      library (:class:`opbridge.Library`), what a host of the runtime loads.
    - ``facts()``: (name, value) lines for ``opbridge doctor``, and
      ``checks()``: its :class:`RuntimeCheck` list (versions that fit, a
      model that runs with the library).
    - ``label``: its name in messages, docs and bench (``ort_custom``: the
      ``short`` name and the route).
    - ``library_kernels(model, feeds, level=None)``: the names of the
      model's library nodes (the nodes of its graph of a loaded library's
      domain, each with a name of its own) that ran as their library's
      kernel in one run of ``model`` (an ONNX path, bytes or ``ModelProto``) on
      ``feeds`` in a session like ``session``'s, as the runtime's own
      profiling tells; a library node missing from the set ran something
      else, a model-local function's body (the ``function`` route's
      fallback). None where the runtime cannot tell: verify then reports
      which ran as unknown.
    - ``wrong_forms``: ONNX operators (``"RotaryEmbedding"``,
      ``"com.microsoft::RotaryEmbedding"``) that this runtime computes wrong in
      some use, each with what is wrong: an export for it avoids them
      (:attr:`opbridge.export.ExportOptions.avoid`), and verify in it flags a
      model that has one.
    """

    name: str
    label: str
    short: str
    session: Callable[..., Any]
    levels: Callable[[], list[str]]
    base_level: str
    default_level: str
    version: Callable[[], str]
    library_path: Callable[[Any], str]
    facts: Callable[[], list[tuple[str, str]]] = field(default=lambda: [])
    checks: Callable[[], list[RuntimeCheck]] = field(default=lambda: [])
    library_kernels: Callable[..., set[str]] | None = None
    wrong_forms: dict[str, str] = field(default_factory=dict)

    def avoid(self) -> frozenset[str]:
        """What an export for this runtime must not emit (``wrong_forms``)."""
        return frozenset(self.wrong_forms)

    def timer(self, threads: int | None = None, level: str | None = None) -> Callable:
        """``timer(op, route, model_bytes, feeds) -> ms``: the median of
        ``REPEATS`` runs after ``WARMUP`` of a session at ``level`` (default
        ``default_level``) with ``threads`` intra-op threads."""

        def timer(op: str, route: str, model: bytes, feeds: dict) -> float:
            session = self.session(model, level=level or self.default_level, threads=threads)
            return median_ms(lambda: session.run(None, feeds))

        return timer


def median_ms(call: Callable[[], object], warmup: int = WARMUP, repeats: int = REPEATS) -> float:
    """The median of ``repeats`` timed calls after ``warmup``, in milliseconds."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)
