"""What a library operator's ONNX node looks like, from its spec: how a call
splits into node inputs and attributes, the attribute types, and the node's
``onnx.defs.OpSchema``. Shared by the exporters and the routes' checks."""

from __future__ import annotations

from typing import Any

from opbridge import _dtypes
from opbridge._library import BUILTIN, Library


def bind(spec: dict, args: tuple, kwargs: dict) -> tuple[list, dict]:
    """Splits a call of the op into its tensor inputs and its attributes,
    filling the spec's defaults."""
    qualified = f"{spec.get('torch_namespace', 'opbridge')}::{spec['name']}"
    names = [p["name"] for p in spec["inputs"]] + [a["name"] for a in spec["attrs"]]
    if len(args) > len(names):
        raise TypeError(f"{qualified}: too many arguments ({len(args)})")
    values = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{qualified}: unexpected argument {key!r}")
        values[key] = value
    inputs = [values.get(p["name"]) for p in spec["inputs"]]
    attrs = {}
    for attr in spec["attrs"]:
        value = values.get(attr["name"], attr["default"])
        if value is None:
            raise TypeError(f"{qualified}: missing attribute {attr['name']!r}")
        attrs[attr["name"]] = attr_value(attr, value)
    return inputs, attrs


def attr_value(attr: dict, value: Any) -> Any:
    kind = attr["type"]
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    if kind == "bool":
        return int(bool(value))
    if kind == "str":
        return str(value)
    if kind == "float[]":
        return [float(v) for v in value]
    raise TypeError(f"unsupported attribute type {kind}")


ONNX_ATTRIBUTE_TYPES = {
    "float": "FLOAT",
    "int": "INT",
    "bool": "INT",
    "str": "STRING",
    "float[]": "FLOATS",
}
# The TorchScript exporter's names for parsing constants and for attribute suffixes.
LEGACY_PARSE = {"float": "f", "int": "i", "bool": "b", "str": "s", "float[]": "fs"}
LEGACY_SUFFIX = {"float": "f", "int": "i", "bool": "i", "str": "s", "float[]": "f"}


SCHEMA_TENSOR_TYPES = [f"tensor({t})" for t in _dtypes.ONNX_TYPE_NAMES.values()]


def onnx_schema(spec: dict, library: Library = BUILTIN):
    """The ``onnx.defs.OpSchema`` of an op's custom-route node, from its spec.

    Each input and output has its own type variable: dtype rules are the
    spec's shape rule's to check (at export through PyTorch, at load in ONNX
    Runtime), with the message that names the argument.
    """
    from onnx import defs, helper

    param = defs.OpSchema.FormalParameter
    option = defs.OpSchema.FormalParameterOption
    inputs = [
        param(
            p["name"],
            f"T_{p['name']}",
            param_option=option.Optional if p["optional"] else option.Single,
        )
        for p in spec["inputs"]
    ]
    outputs = [param(name, f"T_{name}") for name in spec["outputs"]]
    type_constraints = [
        (f"T_{name}", SCHEMA_TENSOR_TYPES, "")
        for name in [p["name"] for p in spec["inputs"]] + list(spec["outputs"])
    ]
    attributes = []
    for attr in spec["attrs"]:
        if attr["default"] is None:
            kind = getattr(defs.OpSchema.AttrType, ONNX_ATTRIBUTE_TYPES[attr["type"]])
            attributes.append(defs.OpSchema.Attribute(attr["name"], kind, required=True))
        else:
            default = helper.make_attribute(attr["name"], attr_value(attr, attr["default"]))
            attributes.append(defs.OpSchema.Attribute(attr["name"], default))
    return defs.OpSchema(
        spec["onnx_type"],
        library.onnx_domain,
        library.domain_version,
        spec["doc"],
        inputs=inputs,
        outputs=outputs,
        type_constraints=type_constraints,
        attributes=attributes,
    )


def attribute_proto_type(attr_spec_type: str) -> int:
    """The ``onnx.AttributeProto`` type of a spec attribute type."""
    import onnx

    return getattr(onnx.AttributeProto, ONNX_ATTRIBUTE_TYPES[attr_spec_type])
