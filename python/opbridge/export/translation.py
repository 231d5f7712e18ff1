"""How each exporter turns a library operator into ONNX: the dynamo
exporter's translation table and the legacy exporter's symbolics."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from opbridge import _dtypes
from opbridge._library import (
    ON_LOAD,
    Library,
    libraries,
    library_for_namespace,
)
from opbridge.export import doors, form_checks
from opbridge.export import routes as _routes
from opbridge.export.decompositions import _check_route, _decomposition, _form, op_route
from opbridge.export.errors import ExportError
from opbridge.export.metadata import METADATA_ROUTE_KEY
from opbridge.export.nodes import (
    LEGACY_PARSE,
    LEGACY_SUFFIX,
    attr_value,
    bind,
    onnx_schema,
)
from opbridge.export.opsets import _refused, check_opset, decomposition_opset
from opbridge.export.options import DEFAULT_OPSET
from opbridge.ops._card import AFTER_REGISTER
from opbridge.ops.adopted import AdoptedOps, adopted, is_adopted
from opbridge.ops.builder import DynamoBuilder, LegacyBuilder


def _build_form(library, spec, form, builder, inputs, attrs, seen, opset: int, avoid):
    """The operator's form written by ``builder`` (either exporter's) at the
    builder's opset; a form refused at that opset is an :class:`ExportError`
    naming ``opset``, the one asked for. With ``seen`` (the exporter's
    ``form_checks.seen_*``: what it knows of each input), the form's outputs
    and attributes are checked against the spec (:func:`form_checks.check_form`)."""
    try:
        result = form(builder, *inputs, **attrs)
    except ValueError as error:
        raise _refused(error, opset) from error
    if seen is not None:
        form_checks.check_form(
            library,
            spec,
            form,
            [seen(value) for value in inputs],
            attrs,
            result,
            opset=builder.opset,
            avoid=avoid,
        )
    return result


def _dynamo_translation(
    library: Library,
    spec: dict,
    route: str | None,
    opset: int,
    avoid: frozenset[str] = frozenset(),
) -> Callable:
    """The dynamo exporter's translation of one operator by ``route`` at
    ``opset``; ``route=None``: by the active plan's route and forms to avoid
    (:func:`opbridge.export.doors.active`), as PyTorch's own door exports."""
    import onnxscript

    domain = onnxscript.values.Opset(library.onnx_domain, library.domain_version)
    custom_op = onnxscript.values.Op(
        domain, spec["onnx_type"], op_schema=onnx_schema(spec, library)
    )
    build_opset = decomposition_opset(opset, dynamo=True)

    def translate(*args, **kwargs):
        op_route_now, avoid_now = _route_of(library, spec, route, avoid)
        inputs, attrs = bind(spec, args, kwargs)
        if _routes.get(op_route_now).library_node:
            _check_has_runtime_library(library, spec, op_route_now)
            # Absent trailing optional inputs are left out of the node.
            while inputs and inputs[-1] is None:
                inputs.pop()
            result = custom_op(*inputs, **attrs)
        else:
            form = _form(library, spec, op_route_now)
            builder = DynamoBuilder(build_opset, avoid_now)
            seen = form_checks.seen_dynamo if _checked(library, spec, form) else None
            result = _build_form(
                library, spec, form, builder, inputs, attrs, seen, opset, avoid_now
            )
        if route is None:
            _mark_route(result, op_route_now)
        return result

    translate.__name__ = f"{library.torch_namespace}_{spec['name']}_{route or 'door'}"
    return translate


def _route_of(
    library, spec: dict, route: str | None, avoid: frozenset[str]
) -> tuple[str, frozenset[str]]:
    """The route and forms to avoid of one operator as an export takes it:
    those given, or (``route`` None: PyTorch's own door) the active plan's
    (:func:`opbridge.export.doors.active`)."""
    if route is not None:
        return route, avoid
    plan = doors.active()
    return op_route(plan.route, library, spec["name"]), plan.avoid


def _checked(library, spec: dict, form: Callable) -> bool:
    """Whether a form's outputs are checked against the op's spec: the
    standard form of an op with a shape rule (an adopted op has none)."""
    return not is_adopted(library) and form is _decomposition(library, spec)


def _check_has_runtime_library(library, spec: dict, route: str) -> None:
    """An adopted operator (no runtime library of its own) takes no route
    that needs one (custom): an ExportError that names it and the routes it
    takes. The function route's node carries its own body, so it needs none."""
    if is_adopted(library) and _routes.get(route).needs_library:
        raise ExportError(
            f"{library.torch_namespace}::{spec['name']}: the {route} route writes the operator "
            "as a node that only an operator library runs, and this operator has none "
            "(opbridge did not build it): export it by the standard or function route "
            f"(route='standard', or with opbridge.export.route({{'{library.torch_namespace}::"
            f"{spec['name']}': 'standard'}}) around torch.onnx.export), or build it with the "
            "SDK for the custom route"
        )


def _mark_route(result, route: str) -> None:
    """Writes the route into the metadata of the nodes that make the
    operator's outputs, where PyTorch's own door exports it (``opbridge
    verify`` of such a file reads it, the file having no model metadata of
    opbridge's)."""
    for value in result if isinstance(result, tuple | list) else (result,):
        producer = getattr(value, "producer", None)
        node = producer() if callable(producer) else None
        if node is not None:
            node.metadata_props[METADATA_ROUTE_KEY] = route


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
        for library in exportable()
        for name, spec in library.specs().items()
    }


def _legacy_symbolic(
    library: Library,
    spec: dict,
    route: str | None,
    opset: int | None,
    avoid: frozenset[str] = frozenset(),
) -> Callable:
    """The TorchScript exporter's symbolic of one operator by ``route`` at
    ``opset``; ``route=None``: by the active plan
    (:func:`opbridge.export.doors.active`) at the export's opset, as
    PyTorch's own door exports."""
    from torch.onnx import symbolic_helper

    def symbolic(g, *args):
        op_route_now, avoid_now = _route_of(library, spec, route, avoid)
        opset_now = symbolic_helper.GLOBALS.export_onnx_opset_version if opset is None else opset
        n_inputs = len(spec["inputs"])
        inputs = [None if symbolic_helper._is_none(v) else v for v in args[:n_inputs]]
        attrs = {}
        for attr, value in zip(spec["attrs"], args[n_inputs:], strict=True):
            raw = symbolic_helper._maybe_get_const(value, LEGACY_PARSE[attr["type"]])
            attrs[attr["name"]] = attr_value(attr, raw)
        if not _routes.get(op_route_now).library_node:
            form = _form(library, spec, op_route_now)
            builder = LegacyBuilder(g, opset_now, avoid_now)
            seen = form_checks.seen_legacy if _checked(library, spec, form) else None
            return _build_form(
                library, spec, form, builder, inputs, attrs, seen, opset_now, avoid_now
            )
        _check_has_runtime_library(library, spec, op_route_now)
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
    spec's shape rule (it cannot infer them for a custom node). An adopted
    operator has no shape rule: ONNX Runtime infers its outputs from the
    node's function body at load time."""
    if is_adopted(library):
        return
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
    for library in exportable():
        for name, spec in library.specs().items():
            torch.onnx.register_custom_op_symbolic(
                f"{library.torch_namespace}::{name}",
                _legacy_symbolic(
                    library, spec, op_route(route, library, name), opset, frozenset(avoid)
                ),
                opset,
            )


# The oldest opset the TorchScript exporter asks a symbolic for: registered
# there, a symbolic serves every opset above it.
_LEGACY_FLOOR = 7


def register_door(library: Library) -> None:
    """Registers ``library``'s operators with PyTorch's own exporters, each
    exported by the active plan when they run (:mod:`opbridge.export.doors`):
    a symbolic per operator with the TorchScript exporter
    (:func:`register_door_symbolics`), and a translation per operator in the
    dynamo exporter's default table (registered once per operator)."""
    register_door_symbolics(library)
    _add_to_dynamo_default_table(library)


def register_door_symbolics(library: Library, *, opset: int = _LEGACY_FLOOR) -> None:
    """The TorchScript exporter's symbolic of each of ``library``'s operators,
    following the active plan, from ``opset`` on (registered again at an
    export's opset, it wins over one register_legacy_symbolics left there)."""
    for name, spec in library.specs().items():
        torch.onnx.register_custom_op_symbolic(
            f"{library.torch_namespace}::{name}", _legacy_symbolic(library, spec, None, None), opset
        )


_IN_DEFAULT_TABLE: set[str] = set()


def _add_to_dynamo_default_table(library: Library) -> None:
    """Adds the library's operators to the table of ONNX functions the dynamo
    exporter starts every export from (``ONNXRegistry.from_torchlib``), as
    custom functions: a ``custom_translation_table`` given to an export is
    put before them, and so wins."""
    try:  # PyTorch's exporter has no public way to add to this table.
        from torch.onnx._internal.exporter import _registration
        from torch.onnx._internal.exporter._torchlib import _torchlib_registry

        table = _torchlib_registry._registry
        meta = _registration.OnnxDecompMeta
    except (ImportError, AttributeError) as error:
        warnings.warn(
            f"opbridge: torch {torch.__version__}'s dynamo ONNX exporter has no default table "
            f"opbridge can add {library.name}'s operators to ({error}): a plain "
            "torch.onnx.export(..., dynamo=True) will not know them; export with "
            "opbridge.export.export, or pass custom_translation_table="
            "opbridge.export.translation_table(route)",
            stacklevel=2,
        )
        return
    for name, spec in library.specs().items():
        qualified = f"{library.torch_namespace}::{name}"
        if qualified in _IN_DEFAULT_TABLE:
            continue
        target = library.op(name)
        table.append(
            meta(
                onnx_function=_dynamo_translation(library, spec, None, DEFAULT_OPSET),
                fx_target=target,
                signature=None,
                is_custom=True,
            )
        )
        _IN_DEFAULT_TABLE.add(qualified)


def exportable() -> list:
    """Every loaded library, then the adopted operators of each namespace
    (:func:`opbridge.ops.adopted.adopted`)."""
    return [*libraries(), *adopted()]


def _register_adopted(card) -> None:
    if library_for_namespace(card.namespace) is None:
        register_door(AdoptedOps(card.namespace))


def install_doors() -> None:
    """Registers every loaded library and adopted operator, and every one
    loaded or adopted later, with PyTorch's exporters (:func:`register_door`;
    done once, when :mod:`opbridge.export` is imported)."""
    for library in exportable():
        register_door(library)
    if register_door not in ON_LOAD:
        ON_LOAD.append(register_door)
    if _register_adopted not in AFTER_REGISTER:
        AFTER_REGISTER.append(_register_adopted)
