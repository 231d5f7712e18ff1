"""Export to ONNX by an explicit route, with either exporter.

The routes (one module each under :mod:`opbridge.export.routes`):

  * ``"custom"``: one node per operator in its library's domain (``opbridge``
    for the built-in operators), with the spec's attribute names; needs that
    library's custom-op library in the runtime.
  * ``"standard"``: plain ai.onnx operators only, loadable by any runtime, in
    the best form the opset has (RMSNormalization, RotaryEmbedding and Gelu
    where the opset defines them).
  * ``"ort"``: ONNX Runtime's own fused operators where one computes exactly
    the op's result (``com.microsoft`` contrib operators, and ONNX Runtime's
    ai.onnx-domain SimplifiedLayerNormalization), the standard form
    elsewhere: runs in a stock ONNX Runtime, no custom-op library.
  * ``"function"``: the custom route's nodes, each with a model-local
    function whose body is the op's standard form: the library's kernels
    where it is loaded, the bodies in a runtime that inlines model-local
    functions (ONNX Runtime; not stock OpenVINO, whose reader refuses the
    call, while opbridge's OpenVINO session inlines them itself).
  * ``"auto"``: per operator, the fastest of these routes that verifies for
    the model at its example inputs (:mod:`opbridge.autoroute`).

``route`` may also be a dict from operator (``"rms_norm"`` or
``"<namespace>::<op>"``) to one of the operator routes (what ``"auto"``
chose, to reproduce it); operators it does not name take the default route,
:data:`DEFAULT_ROUTE` (``"custom"``). Export resolves ``route`` once into
an :class:`~opbridge.export.routes.plan.ExportPlan`, the route of every
operator, which both exporters' hooks, the form checks, the routes'
additions and the metadata read.

Every loaded operator library takes part (:func:`opbridge.load_library`).

The route is always the caller's choice; nothing is inferred from the
environment or from whether the library is loaded.

Modules by concern: :mod:`~opbridge.export.routes` (the route registry and
the export's plan), :mod:`~opbridge.export.decompositions` (each operator's
standard form), :mod:`~opbridge.export.builder` (the builder a form is
written on), :mod:`~opbridge.export.contrib` (ONNX Runtime's own operators),
:mod:`~opbridge.export.translation` (both exporters' hooks),
:mod:`~opbridge.export.opsets`, :mod:`~opbridge.export.dynamic` (dynamic
dimensions), :mod:`~opbridge.export.metadata`,
:mod:`~opbridge.export.form_checks` (the standard forms against the specs),
:mod:`~opbridge.export.functions` (the function route's bodies),
:mod:`~opbridge.export.simplify` and :mod:`~opbridge.export.doors` (the route
PyTorch's own exporters take: a plain ``torch.onnx.export`` of a model with
these operators works, by :data:`DEFAULT_ROUTE` or the route set with
:func:`route` for a block of code).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from typing import Any

import torch

from opbridge.export import doors, routes
from opbridge.export.contrib import drop_unused_outputs
from opbridge.export.decompositions import standard_form
from opbridge.export.doors import route
from opbridge.export.dynamic import batch_dynamic_shapes, dynamic_spec, legacy_dynamic_axes
from opbridge.export.errors import ExportError
from opbridge.export.metadata import set_library_domain_versions, stamp_metadata
from opbridge.export.nodes import (
    ONNX_ATTRIBUTE_TYPES,
    attr_value,
    bind,
    onnx_schema,
)
from opbridge.export.opsets import (
    DYNAMO_BUILD_OPSET,
    OPSET_RANGES,
    ConversionLog,
    check_opset,
    check_opset_import,
    decomposition_opset,
)
from opbridge.export.options import DEFAULT_OPSET, ExportOptions
from opbridge.export.registry import reused_torchlib_registry
from opbridge.export.routes import DEFAULT as DEFAULT_ROUTE
from opbridge.export.routes.plan import ExportPlan
from opbridge.export.translation import (
    exportable,
    install_doors,
    register_door_symbolics,
    register_legacy_symbolics,
    translation_table,
)

# Names of this module that other modules and users import (the re-exported
# node helpers among them).
__all__ = [
    "DEFAULT_OPSET",
    "DEFAULT_ROUTE",
    "ONNX_ATTRIBUTE_TYPES",
    "OPSET_RANGES",
    "ExportError",
    "ExportOptions",
    "ExportPlan",
    "attr_value",
    "batch_dynamic_shapes",
    "bind",
    "check_opset",
    "decomposition_opset",
    "dynamic_spec",
    "export",
    "onnx_schema",
    "register_legacy_symbolics",
    "route",
    "routes",
    "set_route_resolver",
    "stamp_metadata",
    "translation_table",
]


# Route names that are resolved into a per-operator plan before export
# (route="auto", registered by opbridge.autoroute, which sits above export
# and verify): resolver(model, args, options) -> a RouteChoice or a dict.
_RESOLVERS: dict[str, Callable] = {}


def set_route_resolver(name: str, resolver: Callable) -> None:
    """Makes ``route=name`` mean the plan ``resolver(model, args, options)``
    returns (how :mod:`opbridge.autoroute` provides ``route="auto"``)."""
    _RESOLVERS[name] = resolver


def export(
    model: torch.nn.Module,
    args: tuple,
    f: str | os.PathLike | io.BytesIO | None = None,
    *,
    route: str | dict,
    options: ExportOptions | None = None,
    **kwargs: Any,
):
    """Exports ``model`` with ``torch.onnx.export`` by the chosen route.

    Returns the ``onnx.ModelProto`` (also written to ``f`` when given). The
    model carries metadata ``opbridge.version``, ``opbridge.domain_version``
    and ``opbridge.route``, and imports the ``opbridge`` domain only when it
    uses it. With ``dynamo=False`` and ``dynamic_shapes``, the dims named by
    ``dynamic_shapes`` become ``dynamic_axes`` of inputs ``input_0``, ... (or
    of ``input_names`` when given).

    ``options`` (:class:`ExportOptions`) holds the export's settings; each of
    its fields may also be given as a keyword (``opset=20``, ``dynamo=False``,
    ``dynamic_batch=True``, ...), which wins over ``options``. Other keywords
    go to ``torch.onnx.export``.

    ``opset`` (or torch's name for it, ``opset_version``; default 18) must be
    in ``OPSET_RANGES`` for the exporter. The model imports exactly that
    ai.onnx opset, or the export fails with an :class:`ExportError` that says
    why (torch's exporter would keep opset 18 and only log the failure).

    ``dynamic_batch=True`` (without ``dynamic_shapes``) makes dimension 0 of
    every tensor input whose first dimension equals the first input's a
    dynamic ``batch`` dimension; the export fails if the model fixes it.

    ``route`` is one of :func:`opbridge.export.routes.choices` (see the
    module's documentation), a dict from operator to route, the
    :class:`opbridge.autoroute.RouteChoice` that ``route="auto"`` makes
    (recorded as "auto"), or an :class:`ExportPlan`. ``"auto"`` chooses per operator with
    :func:`opbridge.autoroute.choose` (which exports, verifies and times each
    candidate; ``requires_library=False`` leaves out the custom route, for a
    model that must run in a stock ONNX Runtime).

    ``simplify=True`` simplifies the exported model
    (:func:`opbridge.export.simplify.simplify`): every node outside the
    ai.onnx domain kept as exported, or the model as exported and a
    :class:`~opbridge.export.simplify.SimplifyWarning` that says why.
    """
    settings = (options or ExportOptions()).merged(kwargs, "opbridge.export.export")
    plan = _plan(route, model, args, settings)
    dynamic_shapes = _dynamic_shapes(model, args, settings)
    opset = check_opset(settings.opset, dynamo=settings.dynamo)
    proto, conversion = _run_exporter(model, args, plan, opset, dynamic_shapes, kwargs, settings)
    check_opset_import(proto, opset, settings.dynamo, conversion)
    drop_unused_outputs(proto)
    _finish(proto, plan, opset)
    stamp_metadata(proto, plan)
    if settings.simplify:
        from opbridge.export.simplify import simplify

        proto, _ = simplify(proto)
    if f is not None:
        _write(proto, f)
    return proto


def _plan(route, model, args, settings: ExportOptions) -> ExportPlan:
    """The export's plan: ``route`` resolved once (a route name a resolver
    answers for, ``"auto"``, replaced by what it chooses), with the settings'
    forms to avoid."""
    if isinstance(route, str) and route in _RESOLVERS:
        route = _RESOLVERS[route](model, args, settings)
    return ExportPlan.of(route, avoid=settings.avoid)


def _dynamic_shapes(model, args, settings: ExportOptions):
    """The settings' ``dynamic_shapes``, or those ``dynamic_batch=True`` makes."""
    if not settings.dynamic_batch:
        return settings.dynamic_shapes
    if settings.dynamic_shapes is not None:
        raise TypeError(
            "opbridge.export.export: pass dynamic_shapes or dynamic_batch=True, not both"
        )
    # The legacy exporter names inputs flat; torch.export groups *args.
    return batch_dynamic_shapes(args, model if settings.dynamo else None)


def _run_exporter(
    model, args, plan: ExportPlan, opset: int, dynamic_shapes, kwargs, settings: ExportOptions
):
    """``(proto, conversion)``: the model exported by the settings' exporter
    (the conversion log of the dynamo exporter's version converter, else
    None). An error of opbridge's or of an operator's own raised inside
    torch's exporter comes out with its own message first
    (:func:`_own_error_first`)."""
    import onnx

    try:
        if settings.dynamo:
            return _export_dynamo(model, args, plan, opset, dynamic_shapes, kwargs)
        # The symbolics PyTorch's own door uses, following this export's
        # plan; registered again at this opset, over any registered there
        # by register_legacy_symbolics.
        for library in exportable():
            register_door_symbolics(library, opset=opset)
        if dynamic_shapes is not None:
            kwargs = legacy_dynamic_axes(args, dynamic_shapes, kwargs)
        buffer = io.BytesIO()
        # No custom_opsets: given a domain the graph turns out not to use,
        # torch warns "Custom opset domain ... is not used in the model"
        # (for every model without library nodes); the library domains
        # the graph does use get their versions here instead.
        with doors.following(plan):
            torch.onnx.export(model, args, buffer, dynamo=False, opset_version=opset, **kwargs)
        proto = onnx.load_from_string(buffer.getvalue())
        set_library_domain_versions(proto)
        return proto, None
    except Exception as error:
        own = _own_error_first(error)
        if own is not None:
            raise own from error
        raise


def _write(proto, f) -> None:
    import onnx

    if isinstance(f, io.BytesIO):
        f.write(proto.SerializeToString())
    else:
        onnx.save(proto, os.fspath(f))


def _finish(proto, plan: ExportPlan, opset: int) -> None:
    """Each route's additions to the exported model (:attr:`Route.finish`),
    for the library nodes of the operators it exported."""
    by_type = {
        (library.onnx_domain, spec["onnx_type"]): (library, name)
        for library in exportable()
        for name, spec in library.specs().items()
    }
    for used in plan.used():
        if used.finish is None:
            continue

        def selected(node, used=used):
            found = by_type.get((node.domain, node.op_type))
            return found is not None and plan.route_of(*found) is used

        try:
            used.finish(proto, selected, opset, standard_form, plan.avoid)
        except ExportError:
            raise
        except (ValueError, NotImplementedError) as error:
            raise ExportError(f"opbridge.export.export: the {used.name} route: {error}") from error


def _export_dynamo(model, args, plan: ExportPlan, opset: int, dynamic_shapes, kwargs: dict):
    def run(opset_version: int):
        with ConversionLog() as conversion, reused_torchlib_registry():
            program = torch.onnx.export(
                model,
                args,
                dynamo=True,
                opset_version=opset_version,
                dynamic_shapes=dynamic_shapes,
                custom_translation_table=translation_table(plan, opset=opset),
                **kwargs,
            )
        return program.model_proto, conversion

    try:
        return run(opset)
    except ValueError as error:
        # onnxscript's converter refuses a target outside its range for a
        # graph without ai.onnx nodes (only opbridge nodes), where there is
        # nothing to convert.
        if "is not supported. Supported range" not in str(error):
            raise
        reason = str(error)
    proto, conversion = run(DYNAMO_BUILD_OPSET)
    if any(node.domain in ("", "ai.onnx") for node in proto.graph.node):
        raise ExportError(
            f"opbridge.export.export: cannot convert the model to opset {opset}: {reason}"
        )
    kept = [imp for imp in proto.opset_import if imp.domain not in ("", "ai.onnx")]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)
    entry = proto.opset_import.add()
    entry.domain, entry.version = "", opset
    return proto, conversion


def _causes(error: BaseException):
    """``error`` and the exceptions it was raised from or while handling."""
    seen = set()
    while error is not None and id(error) not in seen:
        yield error
        seen.add(id(error))
        error = error.__cause__ or error.__context__


# The colours torch's exporter writes into its messages.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _own_error_first(error: BaseException) -> BaseException | None:
    """What to raise for ``error``, raised by torch's exporter around an error
    of opbridge's (an :class:`ExportError`: a refusal, a form's failure) or
    of an operator's own (its checks, as its fake kernel runs them under
    ``torch.export``: a message that starts with the operator's name): that
    error's message, then torch's advice (file an issue, submit a PR) after
    it. An ExportError for opbridge's; torch's own exception class, with the
    new message, for an operator's. None: ``error`` is neither, or is that
    error itself."""
    names = tuple(
        f"{library.torch_namespace}::{name}" for library in exportable() for name in library.specs()
    )
    causes = list(_causes(error))
    own = next((e for e in causes if isinstance(e, ExportError)), None)
    if own is None:
        own = next((e for e in causes if str(e).startswith(names)), None)
    if own is None or own is error:
        return None
    # torch's summary of the chain, after its advice, repeats the message.
    advice = _ANSI.sub("", str(error)).split("\n\n## Exception summary")[0].strip()
    message = f"{own}\n\n{type(error).__name__} from torch.onnx.export: {advice}"
    if isinstance(own, ExportError):
        return ExportError(message)
    try:
        return type(error)(message)
    except Exception:
        return RuntimeError(message)


# PyTorch's own exporters learn every loaded library's operators (doors).
install_doors()
