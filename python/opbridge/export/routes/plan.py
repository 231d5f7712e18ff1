"""An export's plan: the route of every operator, resolved once from what
``route=`` was given, and the ONNX forms the export avoids.

Both exporters' hooks (:mod:`opbridge.export.translation`), the form checks,
the routes' additions to the model and its metadata read the plan; PyTorch's
own exporters follow the plan set for a block of code
(:func:`opbridge.export.route`, :mod:`opbridge.export.doors`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opbridge._library import BUILTIN, Library
from opbridge.export import routes
from opbridge.export.decompositions import card_of, standard_form
from opbridge.export.routes.base import Route

# What the metadata records as the route of a plan given per operator.
PER_OP = "per-op"


def qualified(op: str) -> str:
    """``op`` as ``<namespace>::<op>``; a bare name is one of opbridge's."""
    return op if "::" in op else f"{BUILTIN.torch_namespace}::{op}"


@dataclass(frozen=True)
class ExportPlan:
    """The route of every operator of one export.

    - ``default``: the route of every operator ``per_op`` does not name.
    - ``per_op``: routes by qualified operator name (``opbridge::rms_norm``).
    - ``avoid``: the ONNX forms the export must not emit
      (:attr:`~opbridge.export.ExportOptions.avoid`).
    - ``label``: for a plan given per operator, what the model's
      ``opbridge.route`` metadata records ("per-op", or "auto" for
      :mod:`opbridge.autoroute`'s choice); None for one route.
    """

    default: Route
    per_op: Mapping[str, Route] = field(default_factory=dict)
    avoid: frozenset[str] = frozenset()
    label: str | None = None

    @classmethod
    def of(
        cls,
        route: Any,
        *,
        avoid: frozenset[str] | set[str] = frozenset(),
        allowed: tuple[str, ...] | None = None,
    ) -> ExportPlan:
        """The plan of ``route``: one route's name, a dict from operator
        (``"rms_norm"`` or ``"<namespace>::<op>"``) to route name (the others
        take :data:`~opbridge.export.routes.DEFAULT`), an
        :class:`opbridge.autoroute.RouteChoice` (recorded as "auto", its
        avoided forms added), or a plan (``avoid`` added). Every route named
        must be one of ``allowed`` (default: every registered route), or a
        ValueError names the ones it may be."""
        avoid = frozenset(avoid)
        if isinstance(route, ExportPlan):
            return dataclasses.replace(route, avoid=route.avoid | avoid)
        label = None
        if hasattr(route, "plan"):  # a RouteChoice
            avoid |= frozenset(getattr(route, "avoid", ()))
            route, label = dict(route.plan), routes.AUTO
        allowed = routes.names() if allowed is None else allowed
        if isinstance(route, dict):
            for op, name in route.items():
                if name not in allowed:
                    raise ValueError(
                        f"opbridge.export: route for {op!r} must be one of {allowed}, got {name!r}"
                    )
            return cls(
                routes.get(routes.DEFAULT),
                {qualified(op): routes.get(name) for op, name in route.items()},
                avoid,
                label or PER_OP,
            )
        if route not in allowed:
            choices = routes.choices() if allowed == routes.names() else allowed
            raise ValueError(f"opbridge.export: route must be one of {choices}, got {route!r}")
        return cls(routes.get(route), {}, avoid)

    @property
    def route(self) -> str | dict[str, str]:
        """The plan as ``route=`` takes it: one route's name, or the route's
        name by operator for a plan given per operator."""
        if self.label is None:
            return self.default.name
        return {op: found.name for op, found in self.per_op.items()}

    def route_of(self, library: Library, name: str) -> Route:
        """The route of ``library``'s operator ``name``."""
        return self.per_op.get(f"{library.torch_namespace}::{name}", self.default)

    def used(self) -> list[Route]:
        """The routes the plan gives some operator, by name."""
        found = {self.default.name: self.default}
        found.update({r.name: r for r in self.per_op.values()})
        return [found[name] for name in sorted(found)]

    def form(self, library: Library, spec: dict) -> tuple[Callable, bool]:
        """``(form, standard)``: the decomposition the operator's route
        builds it with, and whether that is the op's standard form (which
        the export checks against the spec). For a route of library nodes
        there is none: ``(None, False)``."""
        route = self.route_of(library, spec["name"])
        if route.library_node:
            return None, False
        own = route.form(card_of(library, spec))
        if own is not None:
            return own, False
        return standard_form(library, spec), True
