"""How each exporter turns a library operator into ONNX: the dynamo
exporter's translation table and the legacy exporter's symbolics."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from collections.abc import Callable

import torch

from opbridge import _dtypes
from opbridge._imports import WaitingFinder, when_imported
from opbridge._library import (
    ON_LOAD,
    Library,
    libraries,
    library_for_namespace,
)
from opbridge.export import doors, form_checks
from opbridge.export.builder import DynamoBuilder, FormError, LegacyBuilder
from opbridge.export.errors import ExportError
from opbridge.export.metadata import METADATA_ROUTE_KEY
from opbridge.export.nodes import (
    LEGACY_PARSE,
    LEGACY_SUFFIX,
    attr_value,
    bind,
    onnx_schema,
)
from opbridge.export.opsets import check_opset, decomposition_opset, refused_at
from opbridge.export.options import DEFAULT_OPSET
from opbridge.export.routes.base import Route
from opbridge.export.routes.plan import ExportPlan
from opbridge.ops._card import AFTER_REGISTER
from opbridge.ops.adopted import AdoptedOps, adopted, is_adopted


def _build_form(library, spec, plan: ExportPlan, builder, inputs, attrs, seen, opset: int):
    """The operator's form by ``plan`` written by ``builder`` (either
    exporter's) at the builder's opset; a form refused at that opset is an
    :class:`ExportError` naming ``opset``, the one asked for. The standard
    form of an op with a shape rule (an adopted op has none) is checked
    against the spec (:func:`form_checks.check_form`): its outputs and
    attributes, from what the exporter knows of each input (``seen``, the
    exporter's ``form_checks.seen_*``)."""
    form, standard = plan.form(library, spec)
    qualified = f"{library.torch_namespace}::{spec['name']}"
    which = "standard" if standard else plan.route_of(library, spec["name"]).name
    try:
        result = form(builder, *inputs, **attrs)
    except FormError as error:
        # The builder's refusal names no operator.
        raise refused_at(FormError(f"{qualified}: its {which} form: {error}"), opset) from error
    except ValueError as error:
        raise refused_at(error, opset) from error
    except Exception as error:
        # A failure of the form's own code: named by the operator, so that it
        # is not taken for one of the exporter's (whose traceback stays below).
        message = str(error)
        if not message.startswith(qualified):
            message = f"{qualified}: its {which} form failed: {type(error).__name__}: {message}"
        raise ExportError(f"{message} (export at opset {opset})") from error
    if standard and not is_adopted(library):
        form_checks.check_form(
            library,
            spec,
            form,
            [seen(value) for value in inputs],
            attrs,
            result,
            opset=builder.opset,
            avoid=plan.avoid,
        )
    return result


def _dynamo_translation(
    library: Library, spec: dict, plan: ExportPlan | None, opset: int
) -> Callable:
    """The dynamo exporter's translation of one operator by ``plan`` at
    ``opset``; ``plan=None``: by the active plan
    (:func:`opbridge.export.doors.active`), as PyTorch's own door exports."""
    import onnxscript

    domain = onnxscript.values.Opset(library.onnx_domain, library.domain_version)
    custom_op = onnxscript.values.Op(
        domain, spec["onnx_type"], op_schema=onnx_schema(spec, library)
    )
    build_opset = decomposition_opset(opset, dynamo=True)

    def translate(*args, **kwargs):
        now = plan or doors.active()
        route = now.route_of(library, spec["name"])
        inputs, attrs = bind(spec, args, kwargs)
        if route.library_node:
            _check_has_runtime_library(library, spec, route)
            # Absent trailing optional inputs are left out of the node.
            while inputs and inputs[-1] is None:
                inputs.pop()
            result = custom_op(*inputs, **attrs)
        else:
            builder = DynamoBuilder(build_opset, now.avoid)
            result = _build_form(
                library, spec, now, builder, inputs, attrs, form_checks.seen_dynamo, opset
            )
        if plan is None:
            _mark_route(result, route.name)
        return result

    by = plan.route_of(library, spec["name"]).name if plan else "door"
    translate.__name__ = f"{library.torch_namespace}_{spec['name']}_{by}"
    return translate


def _check_has_runtime_library(library, spec: dict, route: Route) -> None:
    """An adopted operator (no runtime library of its own) takes no route
    that needs one (custom): an ExportError that names it and the routes it
    takes. The function route's node carries its own body, so it needs none."""
    if is_adopted(library) and route.needs_library:
        raise ExportError(
            f"{library.torch_namespace}::{spec['name']}: the {route.name} route writes the "
            "operator as a node that only an operator library runs, and this operator has none "
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
    route: str | dict | ExportPlan,
    *,
    opset: int | None = None,
    avoid: frozenset[str] = frozenset(),
) -> dict[Callable, Callable]:
    """``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``.

    ``route`` is one of :func:`opbridge.export.routes.names`, a dict from
    operator to route, or an :class:`~opbridge.export.routes.plan.ExportPlan`.
    ``opset`` is the ``opset_version`` the export will ask for (the standard
    route chooses its form by it); default 18. Covers the operators of every
    loaded library. Check the exported model's ai.onnx opset import: torch
    keeps opset 18 when it cannot convert. ``avoid``: as
    :attr:`ExportOptions.avoid`.
    """
    plan = ExportPlan.of(route, avoid=avoid)
    opset = check_opset(DEFAULT_OPSET if opset is None else opset, dynamo=True)
    return {
        library.op(name): _dynamo_translation(library, spec, plan, opset)
        for library in exportable()
        for name, spec in library.specs().items()
    }


def _legacy_symbolic(
    library: Library, spec: dict, plan: ExportPlan | None, opset: int | None
) -> Callable:
    """The TorchScript exporter's symbolic of one operator by ``plan`` at
    ``opset``; ``plan=None``: by the active plan
    (:func:`opbridge.export.doors.active`) at the export's opset, as
    PyTorch's own door exports."""
    from torch.onnx import symbolic_helper

    def symbolic(g, *args):
        now = plan or doors.active()
        route = now.route_of(library, spec["name"])
        opset_now = symbolic_helper.GLOBALS.export_onnx_opset_version if opset is None else opset
        n_inputs = len(spec["inputs"])
        inputs = [None if symbolic_helper._is_none(v) else v for v in args[:n_inputs]]
        attrs = {}
        for attr, value in zip(spec["attrs"], args[n_inputs:], strict=True):
            raw = symbolic_helper._maybe_get_const(value, LEGACY_PARSE[attr["type"]])
            attrs[attr["name"]] = attr_value(attr, raw)
        if not route.library_node:
            builder = LegacyBuilder(g, opset_now, now.avoid)
            return _build_form(
                library, spec, now, builder, inputs, attrs, form_checks.seen_legacy, opset_now
            )
        _check_has_runtime_library(library, spec, route)
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
    route: str | dict | ExportPlan,
    *,
    opset: int | None = None,
    avoid: frozenset[str] = frozenset(),
) -> None:
    """Registers the ops with the TorchScript exporter (``dynamo=False``).

    ``route`` as for :func:`translation_table`. The last registration wins;
    ``opset`` is the ``opset_version`` the export will use (default 18).
    """
    plan = ExportPlan.of(route, avoid=avoid)
    opset = check_opset(DEFAULT_OPSET if opset is None else opset, dynamo=False)
    for library in exportable():
        for name, spec in library.specs().items():
            torch.onnx.register_custom_op_symbolic(
                f"{library.torch_namespace}::{name}",
                _legacy_symbolic(library, spec, plan, opset),
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
# The dynamo exporter's modules that hold its default table and the type of
# its entries (they import each other): they import onnxscript and onnx_ir,
# which a process that never exports need not load, so the table is filled
# when they are imported (by the first export, or the user), not when
# opbridge is.
_DYNAMO_MODULES = (
    "torch.onnx._internal.exporter._registration",
    "torch.onnx._internal.exporter._torchlib._torchlib_registry",
)


class _DynamoTableFinder(WaitingFinder):
    """Waits for the dynamo exporter's default table, to add every
    exportable library's operators to it then."""


def _add_to_dynamo_default_table(library: Library) -> None:
    """Adds the library's operators to the table of ONNX functions the dynamo
    exporter starts every export from (``ONNXRegistry.from_torchlib``), as
    custom functions: a ``custom_translation_table`` given to an export is
    put before them, and so wins. Done at once where the exporter is
    imported, else when it is."""
    if importlib.util.find_spec(_DYNAMO_MODULES[0]) is None:
        _no_default_table(library, f"no module {_DYNAMO_MODULES[0]}")
        return
    when_imported(_DYNAMO_MODULES, _fill_dynamo_default_table, _DynamoTableFinder)


def _fill_dynamo_default_table() -> None:
    registration, table_module = (sys.modules.get(name) for name in _DYNAMO_MODULES)
    table = getattr(table_module, "_registry", None)
    meta = getattr(registration, "OnnxDecompMeta", None)
    for library in exportable():
        if table is None or meta is None:
            # PyTorch's exporter has no public way to add to its table.
            _no_default_table(library, "its table has moved")
            continue
        for name, spec in library.specs().items():
            qualified = f"{library.torch_namespace}::{name}"
            if qualified in _IN_DEFAULT_TABLE:
                continue
            table.append(
                meta(
                    onnx_function=_dynamo_translation(library, spec, None, DEFAULT_OPSET),
                    fx_target=library.op(name),
                    signature=None,
                    is_custom=True,
                )
            )
            _IN_DEFAULT_TABLE.add(qualified)


def _no_default_table(library: Library, why: str) -> None:
    warnings.warn(
        f"opbridge: torch {torch.__version__}'s dynamo ONNX exporter has no default table "
        f"opbridge can add {library.name}'s operators to ({why}): a plain "
        "torch.onnx.export(..., dynamo=True) will not know them; export with "
        "opbridge.export.export, or pass custom_translation_table="
        "opbridge.export.translation_table(route)",
        stacklevel=3,
    )


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
