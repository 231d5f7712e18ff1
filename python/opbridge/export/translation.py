"""How each exporter turns a library operator into ONNX: the dynamo
exporter's translation table and the legacy exporter's symbolics."""

from __future__ import annotations

from collections.abc import Callable

import torch

from opbridge import _dtypes
from opbridge._library import (
    Library,
    libraries,
)
from opbridge.export import form_checks
from opbridge.export import routes as _routes
from opbridge.export.decompositions import _check_route, _decomposition, _form, op_route
from opbridge.export.nodes import (
    LEGACY_PARSE,
    LEGACY_SUFFIX,
    attr_value,
    bind,
    onnx_schema,
)
from opbridge.export.opsets import _refused, check_opset, decomposition_opset
from opbridge.export.options import DEFAULT_OPSET
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
        builder = DynamoBuilder(build_opset, avoid)
        seen = form_checks.seen_dynamo if checked else None
        return _build_form(library, spec, form, builder, inputs, attrs, seen, opset, avoid)

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
            builder = LegacyBuilder(g, opset, avoid)
            seen = form_checks.seen_legacy if checked else None
            return _build_form(library, spec, form, builder, inputs, attrs, seen, opset, avoid)
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
