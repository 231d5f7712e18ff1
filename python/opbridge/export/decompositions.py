"""The standard-route decomposition of every library's operator, read from
its card (the one registry of an operator's forms: :func:`opbridge.ops.card`,
:func:`opbridge.ops.register_card`), and the form each route takes of an
operator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opbridge._library import (
    BUILTIN,
    Library,
)
from opbridge.export import routes as _routes


def _card_of(library: Library, spec: dict) -> Any:
    """The op's card (:func:`opbridge.ops.card`), or None when it has none."""
    from opbridge.ops import UnknownOperatorError, card

    try:
        return card(f"{library.torch_namespace}::{spec['name']}")
    except UnknownOperatorError:
        return None


def _decomposition(library: Library, spec: dict) -> Callable:
    """The op's standard-route decomposition: its card's ``standard``."""
    found = _card_of(library, spec)
    if found is not None and found.standard is not None:
        return found.standard
    qualified = f"{library.torch_namespace}::{spec['name']}"

    def missing(*_args, **_kwargs):
        raise NotImplementedError(
            f"{qualified} has no standard-route decomposition: give its card one "
            "(opbridge.ops.register_card(Card(..., standard=fn))), or export with "
            "route='custom'"
        )

    return missing


def _check_route(route: Any, allowed: tuple | None = None) -> None:
    if isinstance(route, dict):
        for op, op_route in route.items():
            if op_route not in _routes.names():
                raise ValueError(
                    f"opbridge.export: route for {op!r} must be one of {_routes.names()}, "
                    f"got {op_route!r}"
                )
        return
    allowed = _routes.choices() if allowed is None else allowed
    if route not in allowed:
        raise ValueError(f"opbridge.export: route must be one of {allowed}, got {route!r}")


def _qualified(op: str) -> str:
    return op if "::" in op else f"{BUILTIN.torch_namespace}::{op}"


def op_route(route: str | dict, library: Library, name: str) -> str:
    """The route of one operator under ``route`` (one route, or a dict from
    operator name to route; an operator it does not name takes "custom")."""
    if not isinstance(route, dict):
        return route
    plan = {_qualified(op): r for op, r in route.items()}
    return plan.get(f"{library.torch_namespace}::{name}", "custom")


def _form(library: Library, spec: dict, route: str) -> Callable:
    """The decomposition of a route that builds operators from other ONNX
    operators: what the route makes of the card's forms (see
    :mod:`opbridge.export.routes`), given the op's standard decomposition."""
    return _routes.get(route).form(_card_of(library, spec), _decomposition(library, spec))
