"""The export routes: one module per route, registered here.

A route says how an operator of a library becomes ONNX: a node in the
library's own domain (``custom``), ai.onnx operators (``standard``), or ONNX
Runtime's own fused operators (``ort``), or library nodes with
standard-op bodies as model-local functions (``function``). Everything that
differs between routes lives on its :class:`Route`: whether a model it makes
needs the operator library, how an operator's card gives its form, what
verify checks in the exported graph, its rank for ``route="auto"``, and how
bench and the docs name it. Export (through
:class:`~opbridge.export.routes.plan.ExportPlan`, the route of every
operator of one export), verify, ``route="auto"``, bench, docs and the
CLI read this registry; adding a route is one module that defines its
:class:`Route` and one entry in ``_BUILTIN`` below (a route defined outside
opbridge calls :func:`register_route`).

``"auto"`` is not a route of an operator: it chooses one per operator
(:mod:`opbridge.autoroute`) and is resolved before export looks here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opbridge.export.routes import custom, function, ort, standard
from opbridge.export.routes.base import Route, StructureCheck
from opbridge.ops._card import set_form_routes

__all__ = [
    "AUTO",
    "DEFAULT",
    "Route",
    "StructureCheck",
    "get",
    "register_route",
    "registered",
    "routes",
    "unregister_route",
]

# The built-in routes, in the order they are listed.
_BUILTIN = (custom.ROUTE, standard.ROUTE, ort.ROUTE, function.ROUTE)
# The route of an operator that nothing else names: what a plain
# torch.onnx.export writes, and what a per-operator plan gives the operators
# it leaves out.
DEFAULT = custom.ROUTE.name
# The choice made per operator by measurement (opbridge.autoroute).
AUTO = "auto"


_REGISTERED: dict[str, Route] = {route.name: route for route in _BUILTIN}
set_form_routes(_REGISTERED)


def register_route(route: Route) -> Route:
    """Adds (or replaces) a route. Returns it."""
    if route.name == AUTO:
        raise ValueError(f"opbridge.export.routes: {AUTO!r} is reserved for route='auto'")
    _REGISTERED[route.name] = route
    set_form_routes(_REGISTERED)
    return route


def unregister_route(name: str) -> Route:
    """Removes the route ``name`` (one :func:`register_route` added; the
    default route stays). Returns it."""
    found = get(name)
    if name == DEFAULT:
        raise ValueError(f"opbridge.export.routes: the default route {DEFAULT!r} stays")
    del _REGISTERED[name]
    set_form_routes(_REGISTERED)
    return found


@contextlib.contextmanager
def registered(route: Route) -> Iterator[Route]:
    """``route`` registered within the block, and removed after it."""
    register_route(route)
    try:
        yield route
    finally:
        unregister_route(route.name)


def routes() -> dict[str, Route]:
    """Every route, by name: the built-in ones first, in ``_BUILTIN`` order."""
    return dict(_REGISTERED)


def names() -> tuple[str, ...]:
    """The routes of one operator (what a per-operator plan may name)."""
    return tuple(routes())


def choices() -> tuple[str, ...]:
    """What ``route=`` accepts: every route, then ``"auto"``."""
    return (*names(), AUTO)


def library_free() -> tuple[str, ...]:
    """The routes whose models run without an operator library."""
    return tuple(name for name, route in routes().items() if not route.needs_library)


def door_routes() -> tuple[str, ...]:
    """The routes PyTorch's own exporters take alone (:attr:`Route.door`)."""
    return tuple(name for name, route in routes().items() if route.door)


def by_auto_rank() -> list[Route]:
    """Every route, by :attr:`Route.auto_rank` (then in registry order)."""
    return sorted(routes().values(), key=lambda route: route.auto_rank)


def get(name: str) -> Route:
    """The route ``name``; a ValueError naming the routes for any other."""
    found = routes().get(name)
    if found is None:
        raise ValueError(f"opbridge.export: route must be one of {choices()}, got {name!r}")
    return found
