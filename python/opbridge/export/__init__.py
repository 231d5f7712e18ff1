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
    where it is loaded, the bodies in any other runtime.
  * ``"auto"``: per operator, the fastest of these routes that verifies for
    the model at its example inputs (:mod:`opbridge.autoroute`).

``route`` may also be a dict from operator (``"rms_norm"`` or
``"<namespace>::<op>"``) to one of the operator routes (what ``"auto"``
chose, to reproduce it); operators it does not name take ``"custom"``.

Every loaded operator library takes part (:func:`opbridge.load_library`).

The route is always the caller's choice; nothing is inferred from the
environment or from whether the library is loaded.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
from collections.abc import Callable
from typing import Any

import torch

from opbridge import _dtypes
from opbridge._library import (
    BUILTIN,
    METADATA_DOMAIN_VERSION_PREFIX,
    ONNX_DOMAIN_VERSION,
    VERSION,
    Library,
    libraries,
    library_for_domain,
)
from opbridge.export import form_checks
from opbridge.export import routes as _routes
from opbridge.export.errors import ExportError
from opbridge.export.nodes import (
    LEGACY_PARSE,
    LEGACY_SUFFIX,
    ONNX_ATTRIBUTE_TYPES,
    attr_value,
    bind,
    onnx_schema,
)
from opbridge.export.options import DEFAULT_OPSET, ExportOptions
from opbridge.ops.builder import DynamoBuilder, LegacyBuilder
from opbridge.ops.contrib import drop_unused_outputs

# Names of this module that other modules and users import (the re-exported
# node helpers among them).
__all__ = [
    "DEFAULT_OPSET",
    "LIBRARY_FREE_ROUTES",
    "ONNX_ATTRIBUTE_TYPES",
    "OPSET_RANGES",
    "OP_ROUTES",
    "ROUTES",
    "ExportError",
    "ExportOptions",
    "attr_value",
    "batch_dynamic_shapes",
    "bind",
    "check_opset",
    "decomposition_opset",
    "dynamic_spec",
    "export",
    "onnx_schema",
    "op_route",
    "register_decomposition",
    "register_legacy_symbolics",
    "routes",
    "set_route_resolver",
    "stamp_metadata",
    "translation_table",
]


# The built-in routes of one operator, the routes export accepts, and those
# whose models run in a stock runtime, as the registry has them at import
# (opbridge.export.routes: names(), choices(), library_free() include
# routes registered later).
OP_ROUTES = _routes.names()
ROUTES = _routes.choices()
LIBRARY_FREE_ROUTES = _routes.library_free()
# The dynamo exporter builds every graph at this opset and converts it to the
# requested one after: with onnxscript's version converter from 18 to
# DYNAMO_CONVERTER_MAX_OPSET, with onnx's converter outside that range.
# Both keep a node that is already in the requested opset's form (e.g.
# RMSNormalization, or ReduceMean with an axes attribute below 18), but
# onnx's converter rewrites an upward conversion from the build opset and
# has no adapter for an op newer than it.
DYNAMO_BUILD_OPSET = 18
DYNAMO_CONVERTER_MAX_OPSET = 25
# The opsets export accepts, per exporter (both ends included):
# - dynamo: onnx's converter cannot take an opset-18 graph below 15 (it has no
#   adapter for Add 14 -> 13 or Pow 15 -> 14);
# - legacy: the standard forms need opset 13 (Unsqueeze takes its axes as an
#   input), and the TorchScript exporter stops at 20;
# - both: ONNX Runtime 1.30 loads models up to opset 26.
OPSET_RANGES = {"dynamo": (15, 26), "legacy": (13, 20)}


METADATA_VERSION_KEY = "opbridge.version"
METADATA_DOMAIN_VERSION_KEY = "opbridge.domain_version"
METADATA_ROUTE_KEY = "opbridge.route"
# Per operator, when the routes differ by operator: "opbridge.route.<namespace>::<op>".
METADATA_OP_ROUTE_PREFIX = "opbridge.route."

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


def check_opset(opset: int, dynamo: bool = True) -> int:
    """``opset`` when ``opbridge.export.export`` accepts it for that exporter,
    else a ValueError that names the accepted range."""
    exporter = "dynamo" if dynamo else "legacy"
    low, high = OPSET_RANGES[exporter]
    if isinstance(opset, bool) or not isinstance(opset, int):
        raise ValueError(f"opbridge.export: opset must be an int, got {opset!r}")
    if not low <= opset <= high:
        other = OPSET_RANGES["legacy" if dynamo else "dynamo"]
        raise ValueError(
            f"opbridge.export: opset {opset} is not supported with the {exporter} exporter "
            f"(dynamo={dynamo}); it exports opsets {low} to {high} (with dynamo={not dynamo}: "
            f"{other[0]} to {other[1]})"
        )
    return opset


def decomposition_opset(opset: int, dynamo: bool = True) -> int:
    """The opset whose forms a standard-route decomposition uses when the
    export asks for ``opset``: that opset, except with the dynamo exporter
    above DYNAMO_CONVERTER_MAX_OPSET, where onnx's converter takes the graph
    up from DYNAMO_BUILD_OPSET and so needs that opset's forms."""
    if dynamo and opset > DYNAMO_CONVERTER_MAX_OPSET:
        return DYNAMO_BUILD_OPSET
    return opset


def _refused(error: ValueError, opset: int) -> ExportError:
    return ExportError(f"{error} (export at opset {opset})")


def _dynamo_translation(
    library: Library, spec: dict, route: str, opset: int, avoid: frozenset[str] = frozenset()
) -> Callable:
    import onnxscript

    domain = onnxscript.values.Opset(library.onnx_domain, library.domain_version)
    custom_op = onnxscript.values.Op(
        domain, spec["onnx_type"], op_schema=onnx_schema(spec, library)
    )
    form = _form(library, spec, route)
    checked = form is _decomposition(library, spec)
    build_opset = decomposition_opset(opset, dynamo=True)

    def translate(*args, **kwargs):
        inputs, attrs = bind(spec, args, kwargs)
        if _routes.get(route).library_node:
            # Absent trailing optional inputs are left out of the node.
            while inputs and inputs[-1] is None:
                inputs.pop()
            return custom_op(*inputs, **attrs)
        try:
            result = form(DynamoBuilder(build_opset, avoid), *inputs, **attrs)
        except ValueError as error:
            raise _refused(error, opset) from error
        if checked:
            seen = [form_checks.seen_dynamo(value) for value in inputs]
            form_checks.check_form(
                library, spec, form, seen, attrs, result, opset=build_opset, avoid=avoid
            )
        return result

    translate.__name__ = f"{library.torch_namespace}_{spec['name']}_{route}"
    return translate


def translation_table(
    route: str | dict, *, opset: int | None = None, avoid: frozenset[str] = frozenset()
) -> dict[Callable, Callable]:
    """``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``.

    ``route`` is one of :func:`opbridge.export.routes.names` or a dict from
    operator to route.
    ``opset`` is the ``opset_version`` the export will ask for (the standard
    route chooses its form by it); default 18. Covers the operators of every
    loaded library. Check the exported model's ai.onnx opset import: torch
    keeps opset 18 when it cannot convert. ``avoid``: as
    :attr:`ExportOptions.avoid`.
    """
    _check_route(route, _routes.names())
    opset = check_opset(DEFAULT_OPSET if opset is None else opset, dynamo=True)
    return {
        library.op(name): _dynamo_translation(
            library, spec, op_route(route, library, name), opset, frozenset(avoid)
        )
        for library in libraries()
        for name, spec in library.specs().items()
    }


def _legacy_symbolic(
    library: Library, spec: dict, route: str, opset: int, avoid: frozenset[str] = frozenset()
) -> Callable:
    from torch.onnx import symbolic_helper

    form = _form(library, spec, route)
    checked = form is _decomposition(library, spec)

    def symbolic(g, *args):
        n_inputs = len(spec["inputs"])
        inputs = [None if symbolic_helper._is_none(v) else v for v in args[:n_inputs]]
        attrs = {}
        for attr, value in zip(spec["attrs"], args[n_inputs:], strict=True):
            raw = symbolic_helper._maybe_get_const(value, LEGACY_PARSE[attr["type"]])
            attrs[attr["name"]] = attr_value(attr, raw)
        if not _routes.get(route).library_node:
            try:
                result = form(LegacyBuilder(g, opset, avoid), *inputs, **attrs)
            except ValueError as error:
                raise _refused(error, opset) from error
            if checked:
                seen = [form_checks.seen_legacy(value) for value in inputs]
                form_checks.check_form(
                    library, spec, form, seen, attrs, result, opset=opset, avoid=avoid
                )
            return result
        # Absent trailing optional inputs are left out of the node.
        while inputs and inputs[-1] is None:
            inputs.pop()
        if any(v is None for v in inputs):
            raise NotImplementedError(
                f"{library.torch_namespace}::{spec['name']}: the legacy exporter cannot leave "
                "out a non-trailing optional input"
            )
        named = {f"{a['name']}_{LEGACY_SUFFIX[a['type']]}": attrs[a["name"]] for a in spec["attrs"]}
        outputs = g.op(
            f"{library.onnx_domain}::{spec['onnx_type']}",
            *inputs,
            outputs=len(spec["outputs"]),
            **named,
        )
        _set_legacy_output_types(
            library, spec, inputs, outputs, [attrs[a["name"]] for a in spec["attrs"]]
        )
        return outputs

    return symbolic


def _set_legacy_output_types(
    library: Library, spec: dict, inputs: list, outputs, attrs: list
) -> None:
    """Gives the TorchScript exporter the output dtype and shape from the
    spec's shape rule (it cannot infer them for a custom node)."""
    infos = []
    padded = inputs + [None] * (len(spec["inputs"]) - len(inputs))
    for value in padded:
        if value is None:
            infos.append((False, "", []))
            continue
        value_type = value.type()
        dtype = _dtypes.FROM_TORCHSCRIPT.get(value_type.scalarType() or "")
        sizes = value_type.varyingSizes()
        if dtype is None or sizes is None:
            return  # not known here; ONNX Runtime infers it at load time
        infos.append((True, dtype, [-1 if d is None else d for d in sizes]))
    inferred = library.module.infer(spec["name"], infos, attrs)
    outputs = outputs if isinstance(outputs, tuple | list) else (outputs,)
    for output, (dtype, shape) in zip(outputs, inferred, strict=True):
        # Dtype and rank only: sizes seen while tracing are the example's, and
        # static sizes here would let constant folding bake them into later
        # Shape/Reshape nodes, breaking dynamic axes.
        output.setType(
            inputs[0].type().with_dtype(_dtypes.TORCH[dtype]).with_sizes([None] * len(shape))
        )


def register_legacy_symbolics(
    route: str | dict, *, opset: int | None = None, avoid: frozenset[str] = frozenset()
) -> None:
    """Registers the ops with the TorchScript exporter (``dynamo=False``).

    ``route`` as for :func:`translation_table`. The last registration wins;
    ``opset`` is the ``opset_version`` the export will use (default 18).
    """
    _check_route(route, _routes.names())
    opset = check_opset(DEFAULT_OPSET if opset is None else opset, dynamo=False)
    for library in libraries():
        for name, spec in library.specs().items():
            torch.onnx.register_custom_op_symbolic(
                f"{library.torch_namespace}::{name}",
                _legacy_symbolic(
                    library, spec, op_route(route, library, name), opset, frozenset(avoid)
                ),
                opset,
            )


def stamp_metadata(model, route: str | dict, label: str | None = None):
    """Adds opbridge's metadata and drops unused opset imports of library domains.

    Every library domain the graph uses is imported at the library's version
    and recorded as ``opbridge.domain_version.<domain>``. A per-operator
    ``route`` (a dict) is recorded as ``opbridge.route = label`` ("auto" when
    :mod:`opbridge.autoroute` chose it, else "per-op") and one
    ``opbridge.route.<namespace>::<op>`` entry per operator it names.
    """
    import onnx

    used = {node.domain for node in model.graph.node}
    kept = []
    for imp in model.opset_import:
        library = library_for_domain(imp.domain)
        if library is None or imp.domain in used:
            kept.append(imp)
    props = {p.key: p.value for p in model.metadata_props}
    for library in libraries():
        if library.onnx_domain not in used:
            continue
        if not any(imp.domain == library.onnx_domain for imp in kept):
            kept.append(onnx.helper.make_opsetid(library.onnx_domain, library.domain_version))
        props[METADATA_DOMAIN_VERSION_PREFIX + library.onnx_domain] = str(library.domain_version)
    del model.opset_import[:]
    model.opset_import.extend(kept)
    props[METADATA_VERSION_KEY] = VERSION
    props[METADATA_DOMAIN_VERSION_KEY] = str(ONNX_DOMAIN_VERSION)
    if isinstance(route, dict):
        props[METADATA_ROUTE_KEY] = label or "per-op"
        for op, op_route in sorted(route.items()):
            props[METADATA_OP_ROUTE_PREFIX + _qualified(op)] = op_route
    else:
        props[METADATA_ROUTE_KEY] = route
    del model.metadata_props[:]
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model


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
    module's documentation), a dict from operator to route, or the
    :class:`opbridge.autoroute.RouteChoice` that ``route="auto"`` makes
    (recorded as "auto"). ``"auto"`` chooses per operator with
    :func:`opbridge.autoroute.choose` (which exports, verifies and times each
    candidate; ``requires_library=False`` leaves out the custom route, for a
    model that must run in a stock ONNX Runtime).

    ``simplify=True`` simplifies the exported model
    (:func:`opbridge.export.simplify.simplify`): every node outside the
    ai.onnx domain kept as exported, or the model as exported and a
    :class:`~opbridge.export.simplify.SimplifyWarning` that says why.
    """
    import onnx

    settings = (options or ExportOptions()).merged(kwargs, "opbridge.export.export")
    opset, dynamo, dynamic_shapes = settings.opset, settings.dynamo, settings.dynamic_shapes
    label = None
    if isinstance(route, str) and route in _RESOLVERS:
        route = _RESOLVERS[route](model, args, settings)
    if hasattr(route, "plan"):  # a RouteChoice
        avoid = settings.avoid | frozenset(getattr(route, "avoid", ()))
        settings = dataclasses.replace(settings, avoid=avoid)
        route, label = dict(route.plan), "auto"
    _check_route(route)
    if settings.dynamic_batch:
        if dynamic_shapes is not None:
            raise TypeError(
                "opbridge.export.export: pass dynamic_shapes or dynamic_batch=True, not both"
            )
        # The legacy exporter names inputs flat; torch.export groups *args.
        dynamic_shapes = batch_dynamic_shapes(args, model if dynamo else None)
    opset = check_opset(opset, dynamo=dynamo)
    try:
        if dynamo:
            proto, conversion = _export_dynamo(
                model, args, route, opset, dynamic_shapes, kwargs, settings.avoid
            )
        else:
            conversion = None
            register_legacy_symbolics(route, opset=opset, avoid=settings.avoid)
            if dynamic_shapes is not None:
                kwargs = _legacy_dynamic_axes(args, dynamic_shapes, kwargs)
            buffer = io.BytesIO()
            # No custom_opsets: given a domain the graph turns out not to use,
            # torch warns "Custom opset domain ... is not used in the model"
            # (for every model without library nodes); the library domains
            # the graph does use get their versions here instead.
            torch.onnx.export(model, args, buffer, dynamo=False, opset_version=opset, **kwargs)
            proto = onnx.load_from_string(buffer.getvalue())
            _set_library_domain_versions(proto)
    except Exception as error:
        refused = _find_cause(error, ExportError)
        if refused is not None and refused is not error:
            raise ExportError(str(refused)) from error
        raise
    _check_opset_import(proto, opset, dynamo, conversion)
    drop_unused_outputs(proto)
    _finish(proto, route, opset, settings.avoid)
    stamp_metadata(proto, route, label)
    if settings.simplify:
        from opbridge.export.simplify import simplify

        proto, _ = simplify(proto)
    if f is not None:
        if isinstance(f, io.BytesIO):
            f.write(proto.SerializeToString())
        else:
            onnx.save(proto, os.fspath(f))
    return proto


def _set_library_domain_versions(proto) -> None:
    """Imports each loaded library's domain at the library's version (the
    legacy exporter imports a custom domain it is not told of at version 1),
    in the graph and in its local functions."""
    for imports in (proto.opset_import, *(f.opset_import for f in proto.functions)):
        for imp in imports:
            library = library_for_domain(imp.domain)
            if library is not None:
                imp.version = library.domain_version


def _finish(proto, route: str | dict, opset: int, avoid: frozenset[str] = frozenset()) -> None:
    """Each route's additions to the exported model (:attr:`Route.finish`),
    for the library nodes of the operators it exported."""
    used = set(route.values()) if isinstance(route, dict) else {route}
    if isinstance(route, dict):
        used.add("custom")  # what the operators the plan does not name take
    by_type = {
        (library.onnx_domain, spec["onnx_type"]): (library, name)
        for library in libraries()
        for name, spec in library.specs().items()
    }
    for name in sorted(used):
        finish = _routes.get(name).finish
        if finish is None:
            continue

        def selected(node, name=name):
            found = by_type.get((node.domain, node.op_type))
            return found is not None and op_route(route, *found) == name

        try:
            finish(proto, selected, opset, _decomposition, avoid)
        except ExportError:
            raise
        except (ValueError, NotImplementedError) as error:
            raise ExportError(f"opbridge.export.export: the {name} route: {error}") from error


def batch_dynamic_shapes(args: tuple, model: Any = None) -> tuple | None:
    """``dynamic_shapes`` that make dimension 0 of every tensor of ``args``
    whose first dimension equals the first tensor's one shared ``batch``
    dimension; None when the first tensor is a scalar. With ``model``, the
    entries of a ``*args`` parameter of its ``forward`` are grouped as
    ``torch.export`` expects."""
    from torch.utils import _pytree as pytree

    leaves = [leaf for leaf in pytree.tree_leaves(args) if isinstance(leaf, torch.Tensor)]
    if not leaves or leaves[0].dim() == 0:
        return None
    return dynamic_spec(args, model, batch=True, sequence=False)


def dynamic_spec(args: tuple, model: Any = None, *, batch: bool, sequence: bool) -> Any:
    """``dynamic_shapes`` for ``args``: with ``batch``, dimension 0 of every
    tensor whose first dimension equals the first tensor's (one ``batch``
    dimension, as ``export(dynamic_batch=True)`` makes it); with
    ``sequence``, dimension 1 of every tensor of two or more dimensions
    (tensors of the same length share one: ``sequence``, then
    ``sequence_2``, ...). With ``model``, the entries of a ``*args``
    parameter of its ``forward`` are grouped as ``torch.export`` expects."""
    import inspect

    from torch.utils import _pytree as pytree

    tensors = [leaf for leaf in pytree.tree_leaves(args) if isinstance(leaf, torch.Tensor)]
    first = tensors[0].shape[0] if tensors and tensors[0].dim() > 0 else None
    batch_dim = torch.export.Dim("batch", min=1)
    lengths: dict[int, Any] = {}

    def spec(leaf):
        if not isinstance(leaf, torch.Tensor):
            return None
        dims = {}
        if batch and first is not None and leaf.dim() > 0 and leaf.shape[0] == first:
            dims[0] = batch_dim
        if sequence and leaf.dim() >= 2:
            length = int(leaf.shape[1])
            if length not in lengths:
                name = "sequence" if not lengths else f"sequence_{len(lengths) + 1}"
                lengths[length] = torch.export.Dim(name, min=1)
            dims[1] = lengths[length]
        return dims or None

    specs = tuple(pytree.tree_map(spec, tuple(args)))
    forward = getattr(model, "forward", None)
    if forward is not None:
        params = list(inspect.signature(forward).parameters.values())
        for i, param in enumerate(params):
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                return (*specs[:i], specs[i:])
    return specs


def _export_dynamo(
    model, args, route: str, opset: int, dynamic_shapes, kwargs: dict, avoid=frozenset()
):
    def run(opset_version: int):
        with _ConversionLog() as conversion:
            program = torch.onnx.export(
                model,
                args,
                dynamo=True,
                opset_version=opset_version,
                dynamic_shapes=dynamic_shapes,
                custom_translation_table=translation_table(route, opset=opset, avoid=avoid),
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


def _find_cause(error: BaseException, kind: type) -> BaseException | None:
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class _ConversionLog(logging.Handler):
    """Collects what onnxscript's version converter logs during an export
    (the dynamo exporter reports a failed conversion only there)."""

    LOGGER = "onnxscript.version_converter"

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            cause = str(record.exc_info[1]).strip().splitlines()
            message += f": {cause[-1] if cause else type(record.exc_info[1]).__name__}"
        self.messages.append(message)

    def __enter__(self):
        logging.getLogger(self.LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger(self.LOGGER).removeHandler(self)
        return False


def _check_opset_import(proto, opset: int, dynamo: bool, conversion) -> None:
    imported = {imp.domain: imp.version for imp in proto.opset_import}
    got = imported.get("", imported.get("ai.onnx"))
    if got is None or got == opset:
        return
    why = ""
    if conversion is not None and conversion.messages:
        why = "; the converter said: " + " | ".join(conversion.messages[-2:])
    hint = ""
    if dynamo:
        hint = (
            f" The dynamo exporter builds at opset {DYNAMO_BUILD_OPSET} and converts; "
            "export at an opset the model's ops convert to, or with dynamo=False."
        )
    raise ExportError(
        f"opbridge.export.export: asked for opset {opset}, but the exported model imports ai.onnx "
        f"opset {got}: it could not be converted to {opset}{why}.{hint}"
    )


def _legacy_dynamic_axes(args: tuple, dynamic_shapes: Any, kwargs: dict) -> dict:
    kwargs = dict(kwargs)
    names = list(kwargs.get("input_names") or [f"input_{i}" for i in range(len(args))])
    kwargs["input_names"] = names
    shapes = list(dynamic_shapes.values()) if isinstance(dynamic_shapes, dict) else dynamic_shapes
    axes = dict(kwargs.get("dynamic_axes") or {})
    for name, dims in zip(names, shapes, strict=False):
        if not dims:
            continue
        axes[name] = {int(d): getattr(dim, "__name__", f"{name}_dim{d}") for d, dim in dims.items()}
    kwargs["dynamic_axes"] = axes
    return kwargs
