"""The standard-route decompositions of every library's operators: registered
for user libraries (:func:`register_decomposition`) or written in a card,
and the form each route takes of an operator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opbridge._library import (
    BUILTIN,
    Library,
)
from opbridge.export import routes as _routes

# Standard-route decompositions registered for operators of user libraries,
# keyed by "<namespace>::<name>".
_DECOMPOSITIONS: dict[str, Callable] = {}


def register_decomposition(qualified_name: str, decomposition: Callable) -> Callable:
    """Registers the standard-route decomposition of a user library's operator.

    ``qualified_name`` is ``"<namespace>::<op>"``; ``decomposition(b, *inputs,
    **attrs)`` builds the op from ai.onnx operators with ``b.op(op_type, *inputs,
    **attrs)`` (the same builder the built-in operators use, see
    :mod:`opbridge.ops.builder`): one function serves both exporters. Returns
    the function, so it can be used as a decorator factory's result.
    """
    if "::" not in qualified_name:
        raise ValueError(
            f"opbridge.export.register_decomposition: name the op as '<namespace>::<op>', "
            f"got {qualified_name!r}"
        )
    _DECOMPOSITIONS[qualified_name] = decomposition
    return decomposition


def _decomposition(library: Library, spec: dict) -> Callable:
    """The op's standard-route decomposition: one registered with
    :func:`register_decomposition`, else its card's."""
    from opbridge.ops import UnknownOperatorError, card

    qualified = f"{library.torch_namespace}::{spec['name']}"
    if qualified in _DECOMPOSITIONS:
        return _DECOMPOSITIONS[qualified]
    try:
        standard = card(qualified).standard
    except UnknownOperatorError:
        standard = None
    if standard is not None:
        return standard

    def missing(*_args, **_kwargs):
        raise NotImplementedError(
            f"{qualified} has no standard-route decomposition: give its card one "
            f"(opbridge.ops.register_card) or register one with "
            f"opbridge.export.register_decomposition({qualified!r}, fn), or export with "
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
    from opbridge.ops import UnknownOperatorError, card

    try:
        found = card(f"{library.torch_namespace}::{spec['name']}")
    except UnknownOperatorError:
        found = None
    return _routes.get(route).form(found, _decomposition(library, spec))
