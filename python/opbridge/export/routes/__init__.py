"""The export routes: one module per route, registered here.

A route says how an operator of a library becomes ONNX: a node in the
library's own domain (``custom``), ai.onnx operators (``standard``), or ONNX
Runtime's own fused operators (``ort``), or library nodes with
standard-op bodies as model-local functions (``function``). Everything that differs between
routes lives on its :class:`Route`: whether a model it makes needs the
operator library, how an operator's card gives its form, what verify checks
in the exported graph, and the label bench and the docs show. Export, verify,
``route="auto"``, bench, docs and the CLI read this registry; adding a route
is one module that calls :func:`register_route` and one entry in
``_BUILTIN`` below.

``"auto"`` is not a route of an operator: it chooses one per operator
(:mod:`opbridge.autoroute`) and is resolved before export looks here.
"""

from __future__ import annotations

from opbridge.export.routes import custom, function, ort, standard
from opbridge.export.routes.base import Route, StructureCheck, library_nodes

__all__ = ["AUTO", "Route", "StructureCheck", "get", "library_nodes", "register_route", "routes"]

# The built-in routes, in the order they are listed.
_BUILTIN = (custom.ROUTE, standard.ROUTE, ort.ROUTE, function.ROUTE)
# The choice made per operator by measurement (opbridge.autoroute).
AUTO = "auto"


_REGISTERED: dict[str, Route] = {route.name: route for route in _BUILTIN}


def register_route(route: Route) -> Route:
    """Adds (or replaces) a route. Returns it."""
    if route.name == AUTO:
        raise ValueError(f"opbridge.export.routes: {AUTO!r} is reserved for route='auto'")
    _REGISTERED[route.name] = route
    return route


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


def get(name: str) -> Route:
    """The route ``name``; a ValueError naming the routes for any other."""
    found = routes().get(name)
    if found is None:
        raise ValueError(f"opbridge.export: route must be one of {choices()}, got {name!r}")
    return found
