"""What a route is (:class:`Route`), apart from the registry of routes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StructureCheck:
    """What a route promises about a model it made, as verify reports it."""

    title: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Route:
    """One export route.

    - ``name``: what ``route=`` takes.
    - ``needs_library``: a model it makes needs the operator library (its
      domain's nodes) in the runtime; False means it runs in a stock runtime.
    - ``library_node``: an operator becomes one node in its library's domain;
      otherwise the route builds it from other ONNX operators, by ``form``.
    - ``form(card)``: the decomposition of its own this route builds the op
      with (written against :class:`opbridge.export.builder.Builder`), from
      the op's card (None when it has none); None: the op's standard form.
      Unused for a route of library nodes.
    - ``own_form(card)``: whether the route has a form of its own for the
      op with this card (None: no card), not a fall-back to another route's:
      ``route="auto"`` measures a route as a candidate only then.
    - ``check(model, libraries)``: the route's rule for the exported graph.
    - ``bench_name``: the route in bench's implementation names
      (``ort_<bench_name>``).
    - ``summary``: one line for the docs and ``--help``.
    - ``label``: how bench, docs and reports name the route; by default
      ``"<name> route"``.
    - ``auto_rank``: among candidates of equal time, ``route="auto"`` takes
      the route of the lowest rank (by default after the built-in routes).
    - ``door``: PyTorch's own exporters take the route alone
      (:func:`opbridge.export.route`); False for a route that needs
      :func:`opbridge.export.export`'s own steps (``finish``).
    - ``runtime_ops``: a model it makes may hold a runtime's own operators
      (ONNX Runtime's contrib operators): bench lists those it has.
    - ``bench_base_level``: bench also times its model at the runtime's base
      optimization level (``ort_<bench_name>_nofusion``): the runtime's own
      fusions of the route's plain graph are what that compares.
    - ``finish(model, selected, opset, form_of, avoid)``: what the route adds
      to the exported model, for the library nodes ``selected(node)`` accepts
      (the ``function`` route's bodies); ``form_of(library, spec)`` is an op's
      standard decomposition, ``avoid`` the export's
      :attr:`~opbridge.export.ExportOptions.avoid`. None: nothing.
    """

    name: str
    needs_library: bool
    library_node: bool
    form: Callable[[Any], Callable | None]
    own_form: Callable[[Any], bool]
    check: Callable[[Any, list], StructureCheck]
    bench_name: str
    summary: str
    label: str = ""
    auto_rank: int = 100
    door: bool = True
    runtime_ops: bool = False
    bench_base_level: bool = False
    finish: Callable[[Any, Callable, int, Callable, frozenset], Any] | None = None

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", f"{self.name} route")
