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
Each operator is exported by the default route
(:data:`opbridge.export.routes.DEFAULT`), or by the route set for a block of
code with :func:`route`; the dynamo exporter's nodes of an
operator carry the route in their ``opbridge.route`` metadata, which
``opbridge verify`` of the file reads. :func:`opbridge.export.export` uses
the same registrations, with its own route, checks and metadata.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from opbridge.export import routes
from opbridge.export.routes.plan import ExportPlan

# None: the default route for every operator: one node of its library's
# domain, which ONNX Runtime runs with the library registered
# (sess_options.register_custom_ops_library(get_library_path())).
_ACTIVE: contextvars.ContextVar[ExportPlan | None] = contextvars.ContextVar(
    "opbridge_export_plan", default=None
)


def active() -> ExportPlan:
    """The plan an export in this context follows."""
    return _ACTIVE.get() or ExportPlan.of(routes.DEFAULT)


@contextlib.contextmanager
def route(
    route: str | dict, *, avoid: frozenset[str] | set[str] = frozenset()
) -> Iterator[ExportPlan]:
    """Within the block, PyTorch's own exporters export every operator of
    the loaded libraries by ``route`` (one of
    :func:`opbridge.export.routes.door_routes`: ``custom``, ``standard`` and
    ``ort``, or a dict from operator to one of them) instead of the default
    route::

        with opbridge.export.route("standard"):
            torch.onnx.export(model, args, "model.onnx", dynamo=True)

    ``avoid``: ONNX forms the export must not emit, as for
    :func:`opbridge.export.export`. The setting is per thread and task
    (a context variable), never an environment variable. The routes
    PyTorch's exporters cannot take alone (the function route's bodies,
    auto's measurements) need :func:`opbridge.export.export`."""
    plan = ExportPlan.of(route, avoid=avoid, allowed=routes.door_routes())
    with following(plan):
        yield plan


@contextlib.contextmanager
def following(plan: ExportPlan) -> Iterator[None]:
    """Within the block, exports follow ``plan``, any route included:
    :func:`opbridge.export.export` runs PyTorch's exporter inside it."""
    token = _ACTIVE.set(plan)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
