"""Route ``function``: library nodes with model-local function bodies.

One file runs its bodies in a stock ONNX Runtime (and onnx's reference
evaluator) and the library's kernels where the library is registered.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import helper
from onnx.reference import ReferenceEvaluator

import opbridge
from opbridge.demo.models import build_llama_block
from opbridge.export import routes
from opbridge.ops import card, cards
from opbridge.sdk.testing import export_sample

LEVELS = opbridge.runtimes.onnxruntime.available_levels()
STOCK_LEVELS = {
    "disable_all": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "enable_all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def stock(proto, level="enable_all"):
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = STOCK_LEVELS[level]
    return onnxruntime.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def feeds_of(proto, inputs):
    return {i.name: t.numpy() for i, t in zip(proto.graph.input, inputs, strict=False)}


def outputs_of(module, inputs):
    with torch.no_grad():
        out = module(*inputs)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def assert_close(got, want, message, tol=1e-5):
    assert len(got) == len(want), message
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=message)


def test_the_route_is_registered_and_runs_without_the_library():
    route = routes.get("function")
    assert route.library_node and not route.needs_library
    assert "function" in routes.choices() and "function" in routes.library_free()


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "legacy"])
@pytest.mark.parametrize("name", cards())
def test_every_op_runs_its_body_stock_and_its_kernel_with_the_library(name, dynamo):
    found = card(name)
    proto, module, inputs = export_sample(found, route="function", dynamo=dynamo)
    onnx.checker.check_model(proto, full_check=True)
    spec = opbridge.specs()[found.name]
    nodes = [n for n in proto.graph.node if n.domain == "opbridge"]
    assert [n.op_type for n in nodes] == [spec["onnx_type"]]
    [function] = proto.functions
    assert (function.domain, function.name) == ("opbridge", spec["onnx_type"])
    assert {n.domain for n in function.node} <= {""}
    # Every attribute of the spec, with the node's value (defaults applied).
    assert [a.name for a in function.attribute_proto] == [a["name"] for a in spec["attrs"]]
    assert {p.key: p.value for p in proto.metadata_props}["opbridge.route"] == "function"
    feeds, want = feeds_of(proto, inputs), outputs_of(module, inputs)
    for level in STOCK_LEVELS:
        assert_close(stock(proto, level).run(None, feeds), want, f"{name} stock {level}")
    for level in LEVELS:
        session = opbridge.runtimes.onnxruntime.InferenceSession(proto, optimization_level=level)
        assert_close(session.run(None, feeds), want, f"{name} library {level}")


@pytest.mark.parametrize("name", ["rms_norm", "scaled_clamp", "bias_gelu", "layer_norm"])
def test_the_reference_evaluator_runs_the_bodies(name):
    proto, module, inputs = export_sample(card(name), route="function")
    got = ReferenceEvaluator(proto).run(None, feeds_of(proto, inputs))
    assert_close(got, outputs_of(module, inputs), name)


@pytest.mark.parametrize(
    ("name", "opset", "dynamo"),
    [
        ("rms_norm", 23, True),
        ("rms_norm", 26, True),
        ("layer_norm", 15, True),
        ("bias_gelu", 20, True),
        ("rotary_embedding", 23, True),
        ("rms_norm", 13, False),
        ("normalize_image", 13, False),
    ],
)
def test_bodies_at_the_models_opset(name, opset, dynamo):
    proto, module, inputs = export_sample(card(name), route="function", dynamo=dynamo, opset=opset)
    assert {i.domain: i.version for i in proto.opset_import}[""] == opset
    [function] = proto.functions
    assert [(i.domain, i.version) for i in function.opset_import] == [("", opset)]
    if name == "rms_norm" and opset >= 23:
        assert [n.op_type for n in function.node].count("RMSNormalization") == 1
    feeds, want = feeds_of(proto, inputs), outputs_of(module, inputs)
    assert_close(stock(proto).run(None, feeds), want, f"{name} opset {opset}")


def test_the_library_runs_its_kernel_not_the_body():
    """A body that computes something else (the identity) shows which one
    runs: the stock session the body, the library's session the kernel, at
    every level."""
    proto, module, inputs = export_sample(card("rms_norm"), route="function")
    [function] = proto.functions
    del function.node[:]
    function.node.append(helper.make_node("Identity", ["x"], ["y"]))
    feeds, want = feeds_of(proto, inputs), outputs_of(module, inputs)
    assert_close(stock(proto).run(None, feeds), [inputs[0].numpy()], "the body")
    for level in LEVELS:
        session = opbridge.runtimes.onnxruntime.InferenceSession(proto, optimization_level=level)
        assert_close(session.run(None, feeds), want, f"kernel at {level}")


class TwoNorms(torch.nn.Module):
    """Two rms_norms with different eps, one with a bias, and a float64 path."""

    def __init__(self):
        super().__init__()
        self.a = opbridge.nn.RMSNorm(16, eps=1e-5)
        self.b = opbridge.nn.RMSNorm(16, eps=1e-2, bias=True)
        self.c = opbridge.nn.RMSNorm(16, eps=1e-5)
        with torch.no_grad():
            self.b.bias.normal_(0.0, 0.5)

    def forward(self, x):
        return self.c(self.b(self.a(x)) * 3.0)


def test_nodes_that_need_other_bodies_get_overloads():
    model, x = TwoNorms().eval(), torch.randn(2, 5, 16)
    proto = opbridge.export.export(model, (x,), route="function")
    nodes = [n for n in proto.graph.node if n.op_type == "RmsNorm"]
    assert len(nodes) == 3 and len(proto.functions) == 2
    # a and c share a body; b (other eps, a bias) has its own.
    assert nodes[0].overload == nodes[2].overload != nodes[1].overload
    assert {f.overload for f in proto.functions} == {n.overload for n in nodes}
    assert proto.ir_version >= 10
    want = outputs_of(model, (x,))
    feeds = feeds_of(proto, (x,))
    assert_close(stock(proto).run(None, feeds), want, "stock")
    assert_close(
        opbridge.runtimes.onnxruntime.InferenceSession(proto).run(None, feeds), want, "library"
    )


def test_a_per_op_plan_gives_bodies_to_the_ops_it_routes_by_function():
    model, args = build_llama_block()
    proto = opbridge.export.export(model, args, route={"rms_norm": "function"})
    assert {f.name for f in proto.functions} == {"RmsNorm"}
    props = {p.key: p.value for p in proto.metadata_props}
    assert props["opbridge.route.opbridge::rms_norm"] == "function"


def test_verify_runs_the_bodies_with_dynamic_batch_and_sequence():
    model, args = build_llama_block()
    report = opbridge.verify(model, args, route="function", dynamic_sequence=True, layers=False)
    assert report.passed, report
    assert report.dynamic_batch and report.dynamic_sequence
    checks = {c.name: c for c in report.structure}
    bodies = checks["function bodies (no library) match PyTorch and the kernels"]
    assert bodies.status == "pass" and "without the library" in bodies.detail
    # And with the library, ONNX Runtime ran every node's kernel, not its body.
    assert report.kernels and {k.ran for k in report.kernels} == {"kernel"}, report.kernels


def test_verify_catches_a_body_that_drifts_from_the_kernel():
    model, args = build_llama_block()
    proto = opbridge.export.export(model, args, route="function", dynamic_batch=True)
    drifted = copy.deepcopy(proto)
    function = next(f for f in drifted.functions if f.name == "RmsNorm")
    # The body's epsilon constant, 100 times larger: a second implementation
    # that no longer computes what the kernel does.
    add = next(n for n in function.node if n.op_type == "Add")
    constant = next(n for n in function.node if n.output[0] == add.input[1])
    value = onnx.numpy_helper.to_array(constant.attribute[0].t)
    constant.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(value * 1e6))
    report = opbridge.verify(model, args, onnx_model=drifted, layers=False)
    checks = {c.name: c for c in report.structure}
    bodies = checks["function bodies (no library) match PyTorch and the kernels"]
    assert bodies.status == "fail" and "outside the tolerance" in bodies.detail
    assert not report.passed


def test_verify_fails_a_function_route_model_without_bodies():
    model, args = build_llama_block()
    proto = opbridge.export.export(model, args, route="function")
    del proto.functions[:]
    report = opbridge.verify(model, args, onnx_model=proto, layers=False)
    checks = {c.name: c for c in report.structure}
    check = checks["opbridge nodes match the specs and have function bodies"]
    assert check.status == "fail" and "no model-local function" in check.detail


def test_the_cli_exports_by_the_function_route(tmp_path):
    from opbridge.cli import main

    out = tmp_path / "demo.onnx"
    assert main(["export", "demo", str(out), "--route", "function", "--no-library"]) == 0
    proto = onnx.load(str(out))
    assert (
        proto.functions
        and {p.key: p.value for p in proto.metadata_props}["opbridge.route"] == "function"
    )
