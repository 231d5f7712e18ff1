"""The ONNX Runtime library's messages stay whole whatever the model holds.

A node name (or an attribute's text) is the model's: it may hold a NUL byte,
which would end a C string message early, or quotes. The library writes the
node name escaped and last ("... [node 'name']"), and escapes any control
byte elsewhere. An attribute of the wrong type is named with the type the
spec expects and the type the node has, for every attribute of every op and
every wrong type, never a later message about its value ("got 0 values")."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import opbridge

from op_cases import OPS
from ort_helpers import session, single_node_model

SPECS = opbridge.specs()
# The ONNX attribute type each spec type is stored as.
ONNX_TYPE = {"float": "FLOAT", "int": "INT", "bool": "INT", "str": "STRING", "float[]": "FLOATS"}
# A value of each ONNX attribute type, as onnx.helper makes it.
WRONG_VALUES = {
    "FLOAT": 0.5,
    "INT": 1,
    "STRING": "tanh",
    "FLOATS": [0.5, 0.5, 0.5],
    "INTS": [1, 1, 1],
    "STRINGS": ["a", "b", "c"],
    "TENSOR": numpy_helper.from_array(np.array([0.5, 0.5, 0.5], dtype=np.float32)),
}
# What the C API cannot name (see AttributeTypeOf in csrc/ort_adapter/op_library.cpp).
UNNAMED = "as an empty list or with a type other than FLOAT, INT, STRING, TENSOR, FLOATS and INTS"


def _error(model) -> str:
    with pytest.raises(Exception) as info:
        session(model)
    return str(info.value)


def _ours(message: str, spec) -> str:
    """The library's own message inside ONNX Runtime's (from the op's name on)."""
    qualified = f"{spec['onnx_domain']}::{spec['onnx_type']}"
    assert qualified in message, message
    return message[message.index(qualified) :].rstrip()


def valid_node(name: str):
    """The inputs and attributes of a valid node of op `name`, from its card's
    first sample: the schema's tensors are the node's inputs, its scalars the
    attributes (by the spec's names)."""
    spec = SPECS[name]
    sample = next(OPS[name].samples(large=False))
    values = dict(
        zip(
            [i["name"] for i in spec["inputs"]] + [a["name"] for a in spec["attrs"]],
            sample.args,
            strict=False,
        )
    )
    values.update(sample.kwargs)
    onnx_dtype = {torch.uint8: TensorProto.UINT8, torch.float32: TensorProto.FLOAT}
    inputs = [
        (i["name"], onnx_dtype[values[i["name"]].dtype], list(values[i["name"]].shape))
        for i in spec["inputs"]
        if values.get(i["name"]) is not None
    ]
    attrs = {}
    for a in spec["attrs"]:
        v = values.get(a["name"], a["default"])
        if a["type"] == "bool":
            v = int(v)
        elif a["type"] == "float[]":
            v = [float(x) for x in v]
        attrs[a["name"]] = v
    return inputs, attrs


def _model(name, inputs, attrs, node_name="node0"):
    spec = SPECS[name]
    outputs = [(o, TensorProto.FLOAT) for o in spec["outputs"]]
    model = single_node_model(spec["onnx_type"], inputs, attrs, outputs=outputs)
    model.graph.node[0].name = node_name
    return model


def _with_attribute(model, attr_name, value):
    """model with its node's attribute attr_name replaced by value (or by an
    AttributeProto)."""
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != attr_name]
    made = value if isinstance(value, AttributeProto) else helper.make_attribute(attr_name, value)
    del node.attribute[:]
    node.attribute.extend([*kept, made])
    return model


OPS_WITH_ATTRS = sorted(name for name, spec in SPECS.items() if spec["attrs"])


@pytest.mark.parametrize("name", OPS_WITH_ATTRS)
def test_the_valid_node_loads(name):
    # The base of the cases below is a model that loads: each case changes
    # only the one attribute.
    session(_model(name, *valid_node(name)))


CASES = [
    (name, attr["name"], ONNX_TYPE[attr["type"]], wrong)
    for name in OPS_WITH_ATTRS
    for attr in SPECS[name]["attrs"]
    for wrong in WRONG_VALUES
    if wrong != ONNX_TYPE[attr["type"]]
]


@pytest.mark.parametrize(("name", "attr", "expected", "found"), CASES)
def test_a_mistyped_attribute_names_both_types(name, attr, expected, found):
    spec = SPECS[name]
    model = _with_attribute(_model(name, *valid_node(name)), attr, WRONG_VALUES[found])
    message = _ours(_error(model), spec)
    assert message.endswith("[node 'node0']"), message
    if found == "STRINGS" and expected == "FLOATS":
        # Read as a list, a STRINGS attribute is an empty list of floats and
        # the C API cannot tell it from one: the op's own rule rejects it, and
        # the message says what the attribute may be.
        assert f"attribute '{attr}' reads as an empty list: the node has it {UNNAMED}" in message
        return
    assert f"attribute '{attr}' must be present with type {expected} " in message, message
    if found == "STRINGS":
        assert f"the node has it {UNNAMED}" in message, message
    else:
        assert f"the node has it with type {found}" in message, message
    assert "got 0 values" not in message


# The ops with an attribute that has no default (scale, mean, std).
OPS_WITH_REQUIRED = [
    name for name in OPS_WITH_ATTRS if any(a["default"] is None for a in SPECS[name]["attrs"])
]


def test_some_op_has_an_attribute_without_default():
    assert OPS_WITH_REQUIRED


@pytest.mark.parametrize("name", OPS_WITH_REQUIRED)
def test_an_absent_attribute_without_default_still_says_so(name):
    spec = SPECS[name]
    required = [a for a in spec["attrs"] if a["default"] is None]
    inputs, attrs = valid_node(name)
    del attrs[required[0]["name"]]
    message = _ours(_error(_model(name, inputs, attrs)), spec)
    assert f"attribute '{required[0]['name']}' must be present" in message
    assert message.endswith(": it has no default and the node does not have it [node 'node0']")


def test_an_empty_list_reads_as_an_empty_list():
    # An empty FLOATS list is a list of floats: the op's own rule reports it.
    model = _model("normalize_image", *valid_node("normalize_image"))
    empty = helper.make_attribute("mean", [], attr_type=AttributeProto.FLOATS)
    model = _with_attribute(model, "mean", empty)
    message = _ours(_error(model), SPECS["normalize_image"])
    assert "argument 'mean' must have one value per channel" in message
    assert f"attribute 'mean' reads as an empty list: the node has it {UNNAMED}" in message
    assert message.endswith("[node 'node0']")


NAMES = {
    "a NUL byte": ("no\x00de", r"[node 'no\x00de']"),
    "a quote": ("it's", r"[node 'it\'s']"),
    "a backslash and a newline": ("a\\b\nc", r"[node 'a\\b\x0ac']"),
    "non-ASCII": ("nœud", r"[node 'n\xc5\x93ud']"),
}


@pytest.mark.parametrize("node_name", list(NAMES), ids=list(NAMES))
def test_a_node_name_is_escaped_and_last(node_name):
    raw, shown = NAMES[node_name]
    spec = SPECS["scaled_clamp"]
    # A missing attribute (at kernel creation) and a bad shape (from the spec's rule).
    model = _model("scaled_clamp", [("x", TensorProto.FLOAT, [2, 3])], {"min_val": 0.0}, raw)
    message = _ours(_error(model), spec)
    assert "\x00" not in message and "\n" not in message
    assert message == (
        "opbridge::ScaledClamp node: attribute 'scale' must be present with type FLOAT (float): "
        f"it has no default and the node does not have it {shown}"
    )
    model = _model(
        "rms_norm",
        [("x", TensorProto.FLOAT, [2, 3]), ("weight", TensorProto.FLOAT, [4])],
        {"eps": 1e-6},
        raw,
    )
    message = _ours(_error(model), SPECS["rms_norm"])
    assert "argument 'weight'" in message and message.endswith(shown), message


def test_a_node_name_is_escaped_in_run_time_errors():
    # Shapes known only at run time: the same suffix from Compute. (ONNX
    # Runtime puts the node name, unescaped, before the library's message
    # there: a NUL byte in it would cut the message before ours begins, which
    # no library can prevent; at load time the message is the library's own.)
    model = _model(
        "rms_norm",
        [("x", TensorProto.FLOAT, ["n", "d"]), ("weight", TensorProto.FLOAT, ["k"])],
        {"eps": 1e-6},
        "run\x01'time",
    )
    sess = session(model)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(Exception) as info:
        sess.run(None, {"x": x, "weight": np.ones(4, np.float32)})
    message = _ours(str(info.value), SPECS["rms_norm"])
    assert "argument 'weight'" in message
    assert message.endswith(r"[node 'run\x01\'time']"), message


def test_a_nul_byte_in_a_string_attribute_does_not_cut_the_message():
    inputs, attrs = valid_node("bias_gelu")
    model = _model("bias_gelu", inputs, {**attrs, "approximate": "ta\x00nh"})
    message = _ours(_error(model), SPECS["bias_gelu"])
    assert "\x00" not in message
    assert re.search(r"argument 'approximate' must be 'none' or 'tanh', got 'ta\\x00nh'", message)
    assert message.endswith("[node 'node0']"), message
