"""Failures that used to surface as another layer's message (ONNX Runtime,
protobuf, Python) get an opbridge message that says what to change."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto

import opbridge
from opbridge.verify import compare

from ort_helpers import single_node_model


def _scaled_clamp(**kwargs):
    return single_node_model(
        "ScaledClamp", [("x", TensorProto.FLOAT, [3])], {"scale": 2.0}, **kwargs
    )


def test_newer_ir_version_says_what_to_set():
    import onnxruntime

    model = _scaled_clamp()
    model.ir_version = 14  # what onnx.helper.make_model writes with onnx 1.23
    with pytest.raises(RuntimeError) as info:
        opbridge.runtimes.onnxruntime.InferenceSession(model)
    message = str(info.value)
    assert "has ONNX IR version 14" in message
    assert f"onnxruntime {onnxruntime.__version__} reads up to IR version" in message
    assert "model.ir_version = " in message and "ir_version=" in message
    # The value it names loads.
    supported = int(message.split("reads up to IR version ")[1].split(".")[0])
    model.ir_version = supported
    sess = opbridge.runtimes.onnxruntime.InferenceSession(model)
    assert sess.run(None, {"x": np.ones(3, np.float32)})[0].tolist() == [2, 2, 2]


def test_truncated_file_names_the_path(tmp_path):
    path = tmp_path / "model.onnx"
    data = _scaled_clamp().SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="is not a readable ONNX model") as info:
        opbridge.runtimes.onnxruntime.InferenceSession(path)
    assert str(path) in str(info.value) and f"({len(data) // 2} bytes)" in str(info.value)
    with pytest.raises(ValueError, match="is not a readable ONNX model") as info:
        opbridge.verify(torch.nn.Identity(), (torch.ones(3),), onnx_model=path)
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match="bytes given are not a readable ONNX model"):
        opbridge.runtimes.onnxruntime.InferenceSession(data[: len(data) // 2])


def test_opbridge_domain_version_zero_is_named():
    model = _scaled_clamp(domain_version=0)
    with pytest.raises(
        RuntimeError, match=r"imports ONNX domain 'opbridge' version 0, .* start at 1"
    ):
        opbridge.runtimes.onnxruntime.InferenceSession(model)


def _rms_norm(op_type="RmsNorm", domain="opbridge"):
    return single_node_model(
        op_type,
        [("x", TensorProto.FLOAT, [2, 3]), ("w", TensorProto.FLOAT, [3])],
        {"eps": 1e-6},
        domain=domain,
    )


def _refusal(model) -> str:
    with pytest.raises(RuntimeError) as info:
        opbridge.runtimes.onnxruntime.InferenceSession(model)
    return str(info.value)


def _loaded() -> str:
    """The libraries loaded now: opbridge's, and those another test in this
    process loaded (the SDK's tests build and load some)."""
    names = (f"{lib.onnx_domain} ({lib.adapter_path('ort').name})" for lib in opbridge.libraries())
    return f"(loaded: {', '.join(names)})"


LOAD = "load its library first with opbridge.load_library(path)"
OP_TYPES = "its op types: " + ", ".join(sorted(s["onnx_type"] for s in opbridge.specs().values()))
NO_OP_TYPE = (
    "opbridge: the model's node 'node0' has an op type that the operator library opbridge "
    f"(libopbridge_ort.so, ONNX domain 'opbridge') does not have; {OP_TYPES}"
)


@pytest.mark.parametrize("domain", ["OpBridge", "opbrige"])
def test_a_misspelled_domain_names_the_loaded_one_and_its_onnx_runtime_library(domain):
    message = _refusal(_rms_norm(domain=domain))
    assert message == (
        f"opbridge: the model uses ONNX domain '{domain}', which no loaded operator library "
        f"provides {_loaded()}; did you mean 'opbridge'? Otherwise {LOAD}. "
        f"Unknown domain: '{domain}'"
    )
    assert "_C." not in message


def test_an_unknown_domain_comes_last_and_escaped():
    message = _refusal(_rms_norm(domain="com.example.missing"))
    assert message == (
        "opbridge: the model uses ONNX domain 'com.example.missing', which no loaded operator "
        f"library provides {_loaded()}; {LOAD}. Unknown domain: 'com.example.missing'"
    )
    message = _refusal(_rms_norm(domain="opbridge\x00\n\x1b[2Jcom.example"))
    assert "\x00" not in message and "\n" not in message and "\x1b" not in message
    assert "did you mean" not in message
    assert message.endswith(f"{LOAD}. Unknown domain: 'opbridge\\x00\\n\\x1b[2Jcom.example'")
    message = _refusal(_rms_norm(domain="opbridge\x00"))
    assert "did you mean 'opbridge'?" in message
    assert message.endswith("Unknown domain: 'opbridge\\x00'")


@pytest.mark.parametrize("op_type", ["RMSNorm", "RmsNrom"])
def test_a_misspelled_op_type_names_the_library_its_op_types_and_the_closest(op_type):
    message = _refusal(_rms_norm(op_type))
    assert message == (
        f"{NO_OP_TYPE}; did you mean 'RmsNorm'? The node's op type: 'opbridge:{op_type}'"
    )


def test_an_unknown_op_type_is_named_without_a_guess():
    assert "BiasGelu, LayerNorm" in OP_TYPES and "RmsNorm, RotaryEmbedding" in OP_TYPES
    message = _refusal(_rms_norm("NoSuchOp"))
    assert message == f"{NO_OP_TYPE}. The node's op type: 'opbridge:NoSuchOp'"


def test_a_nul_byte_in_a_node_name_or_op_type_is_escaped():
    model = _rms_norm("RmsNorm\x00\r")
    model.graph.node[0].name = "node\x000"
    message = _refusal(model)
    assert "\x00" not in message and "\r" not in message
    assert message.startswith("opbridge: the model's node 'node\\x000' has an op type that")
    assert message.endswith(
        "did you mean 'RmsNorm'? The node's op type: 'opbridge:RmsNorm\\x00\\r'"
    )


def test_op_types_are_checked_in_subgraphs_and_calls_of_local_functions_pass():
    from onnx import helper

    F = TensorProto.FLOAT
    then_branch = helper.make_graph(
        [helper.make_node("RmsNrom", ["x", "w"], ["z"], domain="opbridge", name="inner")],
        "then",
        [],
        [helper.make_tensor_value_info("z", F, [3])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["z"])],
        "else",
        [],
        [helper.make_tensor_value_info("z", F, [3])],
    )
    branch = helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)
    graph = helper.make_graph(
        [branch],
        "branches",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", F, [3]),
            helper.make_tensor_value_info("w", F, [3]),
        ],
        [helper.make_tensor_value_info("y", F, [3])],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("opbridge", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    message = _refusal(model)
    assert message.startswith("opbridge: the model's node 'inner' has an op type that")
    assert message.endswith("did you mean 'RmsNorm'? The node's op type: 'opbridge:RmsNrom'")
    # A node calling the model's own function in a library's domain is no op of the library.
    twice = helper.make_function(
        "opbridge", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])], opsets[:1]
    )
    graph = helper.make_graph(
        [helper.make_node("Twice", ["x"], ["y"], domain="opbridge")],
        "calls",
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, [3])],
    )
    model = helper.make_model(graph, opset_imports=opsets, functions=[twice], ir_version=10)
    (got,) = opbridge.runtimes.onnxruntime.InferenceSession(model).run(
        None, {"x": np.ones(3, np.float32)}
    )
    assert got.tolist() == [2, 2, 2]


@pytest.mark.parametrize("model", ["str", None, 3])
def test_patch_and_unpatch_name_a_non_module(model):
    with pytest.raises(TypeError, match=r"opbridge.patch: model must be a torch.nn.Module, got"):
        opbridge.patch(model)
    with pytest.raises(TypeError, match=r"opbridge.unpatch: model must be a torch.nn.Module"):
        opbridge.unpatch(model)


def test_patch_names_a_rule_that_is_not_callable():
    with pytest.raises(TypeError, match=r"rules\[1\] must be callable .* got str"):
        opbridge.patch(torch.nn.Sequential(torch.nn.ReLU()), rules=[lambda *a: None, "rms"])


class Clamp(torch.nn.Module):
    def forward(self, x):
        return opbridge.scaled_clamp(x, 2.0, -1.0, 1.0)


@pytest.mark.parametrize(
    ("name", "value"), [("rtol", -1e-5), ("atol", -1.0), ("atol", float("nan"))]
)
def test_verify_refuses_a_negative_tolerance(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be a number >= 0"):
        opbridge.verify(Clamp(), (torch.ones(2, 3),), route="custom", **{name: value})


def test_verify_fails_when_nothing_was_compared():
    x = torch.full((2, 3), float("nan"))
    report = opbridge.verify(Clamp().eval(), (x,), route="custom", draws=1, layers=False)
    assert not report.passed
    assert any("nothing compared" in line for line in report.failures()), report.failures()
    # NaN on both sides is not a difference between optimization levels.
    assert report.fusion_problems == []


def test_compare_reports_nothing_compared():
    both_nan = compare("y", np.full(4, np.nan), np.full(4, np.nan), 1e-5, 1e-5)
    assert not both_nan.passed and both_nan.compared == 0
    assert "nothing compared: all 4 elements" in both_nan.detail
    some_nan = compare("y", np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), 1e-5, 1e-5)
    assert some_nan.passed and some_nan.compared == 1
    empty = compare("y", np.zeros((0, 3)), np.zeros((0, 3)), 1e-5, 1e-5)
    assert empty.passed
