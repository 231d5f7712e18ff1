"""PyTorch's own exporters as a door: a model with operators of any loaded
library exports with a plain ``torch.onnx.export`` (``dynamo=True`` and
``dynamo=False``), ``torch.onnx.export`` of a ``torch.export`` program, and
whatever calls them (transformers' exporters, a training framework's
``to_onnx``), with no opbridge call in between.

How each exporter learns an operator's ONNX form, by PyTorch's own
mechanisms:

- the TorchScript exporter (``dynamo=False``): a symbolic per operator,
  registered with ``torch.onnx.register_custom_op_symbolic``, as
  torchvision registers its own;
- the dynamo exporter: a translation per operator in the default table of
  ONNX functions it builds every export from (the one its ATen operators
  come from); a ``custom_translation_table`` a caller passes still wins.

Both are registered when a library is loaded (opbridge's own on import):
:func:`opbridge.export.translation.install_doors`.
Each operator is exported by :data:`DEFAULT_ROUTE`, or by the route set for
a block of code with :func:`route`; the dynamo exporter's nodes of an
operator carry the route in their ``opbridge.route`` metadata, which
``opbridge verify`` of the file reads. :func:`opbridge.export.export` uses
the same registrations, with its own route, checks and metadata.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from opbridge.export.decompositions import _check_route

# What a plain torch.onnx.export makes of an operator: one node of its
# library's domain, which ONNX Runtime runs with the library registered
# (sess_options.register_custom_ops_library(get_library_path())).
DEFAULT_ROUTE = "custom"
# The routes PyTorch's exporters can take alone: the function route's bodies
# and auto's measurements need opbridge.export.export.
DOOR_ROUTES = ("custom", "standard", "ort")


@dataclass(frozen=True)
class Plan:
    """The route of every operator in an export: ``route`` (one route for
    every operator, or a dict from operator to route) and the ONNX forms the
    export must ``avoid`` (:attr:`~opbridge.export.ExportOptions.avoid`)."""

    route: str | dict = DEFAULT_ROUTE
    avoid: frozenset[str] = frozenset()


_DEFAULT_PLAN = Plan()
# None: the default plan.
_ACTIVE: contextvars.ContextVar[Plan | None] = contextvars.ContextVar(
    "opbridge_export_plan", default=None
)


def active() -> Plan:
    """The plan an export in this context follows."""
    return _ACTIVE.get() or _DEFAULT_PLAN


@contextlib.contextmanager
def route(route: str | dict, *, avoid: frozenset[str] | set[str] = frozenset()) -> Iterator[Plan]:
    """Within the block, PyTorch's own exporters export every operator of
    the loaded libraries by ``route`` (one of ``custom``, ``standard`` and
    ``ort``, or a dict from operator to one of them) instead of
    :data:`DEFAULT_ROUTE`::

        with opbridge.export.route("standard"):
            torch.onnx.export(model, args, "model.onnx", dynamo=True)

    ``avoid``: ONNX forms the export must not emit, as for
    :func:`opbridge.export.export`. The setting is per thread and task
    (a context variable), never an environment variable."""
    _check_route(route, DOOR_ROUTES)
    if isinstance(route, dict):
        refused = {op: r for op, r in route.items() if r not in DOOR_ROUTES}
        if refused:
            raise ValueError(
                f"opbridge.export.route: PyTorch's exporters take the routes {DOOR_ROUTES}, "
                f"got {refused}; export with opbridge.export.export for the others"
            )
    token = _ACTIVE.set(Plan(route, frozenset(avoid)))
    try:
        yield active()
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def following(plan: Plan) -> Iterator[None]:
    """Within the block, exports follow ``plan``, any route included:
    :func:`opbridge.export.export` runs PyTorch's exporter inside it."""
    token = _ACTIVE.set(plan)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
