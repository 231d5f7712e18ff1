"""Model-local ONNX functions for library nodes (route ``function``).

A library node (``opbridge::RmsNorm``) runs only where its operator library
is loaded. A model-local function with the node's domain and op type gives
it a body of ai.onnx operators: a runtime without the library runs the body,
one with the library registered runs the library's kernel. The body is the
card's standard form at the model's opset, built
as the standard route builds it for the node: for its attribute values and
its inputs' element types and the dimensions the model fixes (dynamic ones
stay dynamic in the body).

Nodes of one op type that need different bodies (other attribute values,
element types, fixed dimensions or optional inputs) get one function each,
distinguished by ONNX's ``overload`` (IR version 10): ONNX Runtime selects
by it; ``onnx.reference.ReferenceEvaluator`` (onnx 1.23) does not, and runs
the last function of the name for every node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opbridge import _dtypes
from opbridge._library import Library
from opbridge.export.builder import ProtoBuilder, ProtoValue
from opbridge.export.form_checks import check_form, seen_proto
from opbridge.export.nodes import attribute_proto_type
from opbridge.ops.adopted import exportable_for_domain

# The IR version that has function overloads.
OVERLOAD_IR_VERSION = 10
_DOC = "opbridge {name}: the standard form of {qualified}, for {detail}"


def _value_types(model) -> dict[str, Any]:
    """Every value's TypeProto the graph declares (inputs, outputs,
    value_info, initializers as tensors), after ONNX's shape inference where
    it runs."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    types = {}
    for graph in (model.graph, inferred.graph):
        for value in (*graph.input, *graph.output, *graph.value_info):
            if value.type.HasField("tensor_type"):
                types.setdefault(value.name, value.type)
    for init in model.graph.initializer:
        types.setdefault(
            init.name, onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims))
        )
    return types


def _proto_value(name: str, formal: str, types: dict) -> ProtoValue:
    found = types.get(name)
    if found is None:
        return ProtoValue(formal)
    tensor = found.tensor_type
    dtype = _dtypes.FROM_ONNX.get(tensor.elem_type)
    shape = None
    if tensor.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    return ProtoValue(formal, dtype, shape)


def _attributes(node, spec: dict) -> dict[str, Any]:
    """The node's attributes by the spec's names, defaults applied, as the
    decompositions take them."""
    import onnx

    given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    values = {}
    for attr in spec["attrs"]:
        value = given.get(attr["name"], attr.get("default"))
        if isinstance(value, bytes):
            value = value.decode()
        if attr["type"] == "float[]" and value is not None:
            value = [float(v) for v in value]
        values[attr["name"]] = value
    return values


def _body(
    node, library: Library, spec: dict, form: Callable, opset: int, types: dict, avoid=frozenset()
) -> tuple[Any, str]:
    """The FunctionProto for ``node`` (no overload set) and what it was built for."""
    from onnx import helper

    formals = [p["name"] for p in spec["inputs"]][: len(node.input)]
    inputs = [
        None if not actual else _proto_value(actual, formal, types)
        for actual, formal in zip(node.input, formals, strict=False)
    ]
    attrs = _attributes(node, spec)
    builder = ProtoBuilder(opset, avoid)
    result = form(builder, *inputs, **attrs)
    results = result if isinstance(result, tuple | list) else (result,)
    outputs = list(spec["outputs"])
    if len(results) != len(outputs):
        raise ValueError(
            f"{library.torch_namespace}::{spec['name']}: the standard form gives "
            f"{len(results)} outputs, the spec has {len(outputs)}"
        )
    check_form(
        library,
        spec,
        form,
        [seen_proto(value) for value in inputs],
        attrs,
        result,
        opset=opset,
        avoid=avoid,
        what="standard form as a function body",
    )
    nodes = list(builder.nodes)
    for value, name in zip(results, outputs, strict=True):
        # Each function output is a value of its own (an output may also be an input).
        nodes.append(helper.make_node("Identity", [value.name], [name]))
    described = [
        f"{formal} absent" if v is None else f"{formal} {v.dtype or 'of any type'} {_dims(v)}"
        for formal, v in zip(formals, inputs, strict=True)
    ]
    described += [f"{name}={value!r}" for name, value in attrs.items()]
    detail = ", ".join(described)
    function = helper.make_function(
        node.domain,
        node.op_type,
        formals,
        outputs,
        nodes,
        [helper.make_opsetid("", opset)],
        [],
        doc_string=_DOC.format(
            name=library.name, qualified=f"{library.torch_namespace}::{spec['name']}", detail=detail
        ),
    )
    for attr in spec["attrs"]:
        value = attrs[attr["name"]]
        if value is None:
            continue
        proto = helper.make_attribute(attr["name"], value)
        if proto.type != attribute_proto_type(attr["type"]):
            proto = helper.make_attribute(
                attr["name"], value, attr_type=attribute_proto_type(attr["type"])
            )
        function.attribute_proto.append(proto)
    return function, detail


def _dims(value: ProtoValue) -> str:
    if value.shape is None:
        return "of any shape"
    return "[" + ", ".join("?" if d is None else str(d) for d in value.shape) + "]"


def add_functions(
    model,
    selected: Callable[[Any], bool],
    opset: int,
    form_of: Callable,
    avoid: frozenset[str] = frozenset(),
) -> int:
    """Gives every library node of ``model`` that ``selected(node)`` accepts a
    model-local function (see the module's documentation). ``form_of(library,
    spec)`` is the op's standard decomposition; ``avoid`` the operators the
    bodies must not use where a form has another way. Returns the number of
    functions added."""
    types = _value_types(model)
    bodies: dict[tuple[str, str], list[tuple[bytes, Any]]] = {}
    assigned: list[tuple[Any, tuple[str, str], int]] = []
    for node in model.graph.node:
        library = exportable_for_domain(node.domain)
        if library is None or not selected(node):
            continue
        spec = next(
            (s for s in library.specs().values() if s.get("onnx_type") == node.op_type), None
        )
        if spec is None:
            continue
        function, _ = _body(node, library, spec, form_of(library, spec), opset, types, avoid)
        key = (node.domain, node.op_type)
        known = bodies.setdefault(key, [])
        body = _canonical(function)
        index = next((i for i, (b, _) in enumerate(known) if b == body), None)
        if index is None:
            known.append((body, function))
            index = len(known) - 1
        assigned.append((node, key, index))
    overloaded = {key for key, found in bodies.items() if len(found) > 1}
    for node, key, index in assigned:
        if key in overloaded:
            node.overload = f"v{index + 1}"
    existing = {(f.domain, f.name, f.overload) for f in model.functions}
    added = 0
    for key, found in bodies.items():
        for index, (_, function) in enumerate(found):
            if key in overloaded:
                function.overload = f"v{index + 1}"
            if (function.domain, function.name, function.overload) in existing:
                raise ValueError(
                    f"the model already has a function {function.domain}::{function.name}"
                    f"{f' overload {function.overload}' if function.overload else ''}"
                )
            model.functions.append(function)
            added += 1
    if overloaded and model.ir_version < OVERLOAD_IR_VERSION:
        model.ir_version = OVERLOAD_IR_VERSION
    return added


def _canonical(function) -> bytes:
    """The body and attributes of a function, without its documentation."""
    copy = type(function)()
    copy.CopyFrom(function)
    copy.doc_string = ""
    return copy.SerializeToString(deterministic=True)


def library_functions(model) -> dict[tuple[str, str, str], Any]:
    """The model's functions for library domains, by (domain, name, overload)."""
    return {
        (f.domain, f.name, f.overload): f
        for f in model.functions
        if exportable_for_domain(f.domain) is not None
    }
