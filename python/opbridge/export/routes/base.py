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
      otherwise ``form(card)`` gives the decomposition that builds it.
    - ``form(card, standard)``: the decomposition this route builds the op
      with (written against :class:`opbridge.ops.builder.Builder`), from the
      op's card (None when it has none) and its ``standard`` decomposition
      (the card's); None for a route of library nodes.
    - ``own_form(card)``: whether the route has a form of its own for the
      op with this card (None: no card), not a fall-back to another route's:
      ``route="auto"`` measures a route as a candidate only then.
    - ``check(model, libraries)``: the route's rule for the exported graph.
    - ``bench_name``: the route in bench's implementation names
      (``ort_<bench_name>``), and ``label``: how bench, docs and reports
      name the route.
    - ``summary``: one line for the docs and ``--help``.
    - ``finish(model, selected, opset, form_of, avoid)``: what the route adds
      to the exported model, for the library nodes ``selected(node)`` accepts
      (the ``function`` route's bodies); ``form_of(library, spec)`` is an op's
      standard decomposition, ``avoid`` the export's
      :attr:`~opbridge.export.ExportOptions.avoid`. None: nothing.
    """

    name: str
    needs_library: bool
    library_node: bool
    form: Callable[[Any, Callable], Callable | None]
    own_form: Callable[[Any], bool]
    check: Callable[[Any, list], StructureCheck]
    bench_name: str
    label: str
    summary: str
    finish: Callable[[Any, Callable, int, Callable, frozenset], Any] | None = None


def library_nodes(model, libraries: list) -> list:
    """The nodes of ``model`` in the domain of one of ``libraries``."""
    domains = {lib.onnx_domain for lib in libraries}
    return [node for node in model.graph.node if node.domain in domains]
