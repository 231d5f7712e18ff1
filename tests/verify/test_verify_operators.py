"""opbridge.verify operator by operator: every call of a library operator,
made functionally inside a module's forward, against its node in the graph."""

from __future__ import annotations

import json

import onnx
import pytest
import torch

import opbridge
from opbridge.verify import FAIL, NOT_APPLICABLE, PASS, map_calls

DIM = 16
# The calls the model makes, in order: (operator, call, calling module).
CALLS = [
    ("opbridge::rms_norm", 1, "blocks.0"),
    ("opbridge::rms_norm", 2, "blocks.1"),
    ("opbridge::bias_gelu", 1, ""),
]
DIVERGING = "opbridge::rms_norm (call 2, in module blocks.1)"
# Only blocks.1's rms_norm has this eps: the faults below hit that call alone.
DIVERGING_EPS = 1e-3
QUICK = {"levels": ["disable_all"], "draws": 1, "dynamic_batch": False}


class Block(torch.nn.Module):
    """rms_norm called functionally (not a module of its own), then a Linear."""

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(DIM))
        self.down = torch.nn.Linear(DIM, DIM)

    def forward(self, x):
        return self.down(opbridge.rms_norm(x, self.weight, eps=self.eps))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(DIM, DIM)
        self.blocks = torch.nn.ModuleList([Block(1e-6), Block(DIVERGING_EPS)])
        self.bias = torch.nn.Parameter(0.1 * torch.randn(DIM))

    def forward(self, x):
        h = self.up(x)
        for block in self.blocks:
            h = block(h)
        return opbridge.bias_gelu(h, self.bias)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(2, 5, DIM),)


@pytest.fixture(scope="module")
def custom_proto(net):
    model, args = net
    return opbridge.export.export(model, args, route="custom", verbose=False)


def _calls(report):
    return [(r.op, r.call, r.module) for r in report.operators]


def _without_metadata(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for node in copy.graph.node:
        del node.metadata_props[:]
    return copy


def test_standard_route_divergence_names_the_operator_and_its_module(net, monkeypatch):
    """A wrong standard-route decomposition of one call: the modules see only
    the Linear after it diverge; the operator rows name the call itself."""
    model, args = net
    card = opbridge.ops.card("rms_norm")
    correct = card.standard

    def wrong(b, x, weight, bias=None, *, eps):
        return correct(b, x, weight, bias, eps=0.5 if eps == DIVERGING_EPS else eps)

    monkeypatch.setattr(card, "standard", wrong)

    report = opbridge.verify(model, args, route="standard", **QUICK)

    assert not report.passed
    assert _calls(report) == CALLS
    # bias_gelu takes what the diverging call fed on: it diverges after it.
    assert [r.status for r in report.operators] == [PASS, FAIL, FAIL]
    assert report.first_divergence_op == DIVERGING
    call = report.first_divergence_call
    assert call.onnx_values and call.worst.max_abs_err > 1e-2
    assert (call.case, call.level) == ("example", "disable_all")
    # The module-level view: the op is no module, so the Linear after it is named.
    assert report.first_divergence == "blocks.1.down"
    text = report.format()
    assert "Operator by operator: available: 3 of 3 calls mapped" in text
    assert f"first divergence: {DIVERGING} (example, disable_all)" in text
    first_line = f"operators: 2 of 3 calls diverge; first {DIVERGING}"
    assert any(f.startswith(first_line) for f in report.failures())
    data = json.loads(report.to_json())
    assert data["first_divergence_op"] == DIVERGING
    assert [(o["op"], o["call"], o["module"], o["status"]) for o in data["operators"]][1] == (
        "opbridge::rms_norm",
        2,
        "blocks.1",
        FAIL,
    )
    assert data["operators"][1]["label"] == DIVERGING


def test_agreeing_model_shows_passing_operator_rows(net):
    model, args = net
    report = opbridge.verify(model, args, route="standard", **QUICK)

    assert report.passed, report.format()
    assert _calls(report) == CALLS
    assert all(r.status == PASS and r.worst is not None and r.onnx_values for r in report.operators)
    assert report.first_divergence_op is None
    assert "opbridge::bias_gelu" in report.format()

    # Without the exporter's metadata a decomposed call has no node to be found by.
    stripped = _without_metadata(report.onnx_model)
    degraded = opbridge.verify(model, args, onnx_model=stripped, **QUICK)
    assert degraded.passed, degraded.format()
    assert degraded.operator_mapping.startswith("unavailable: 0 of 3 calls mapped")
    assert all(r.status == NOT_APPLICABLE for r in degraded.operators)
    assert "export with the dynamo exporter" in degraded.operators[0].detail


def test_custom_route_compares_each_library_node(net, custom_proto):
    model, args = net
    report = opbridge.verify(model, args, onnx_model=custom_proto, **QUICK)

    assert report.passed, report.format()
    assert _calls(report) == CALLS
    assert all(r.status == PASS for r in report.operators)
    by_value = {o: n for n in custom_proto.graph.node for o in n.output}
    types = [by_value[r.onnx_values[0]].op_type for r in report.operators]
    assert types == ["RmsNorm", "RmsNorm", "BiasGelu"]


@pytest.mark.parametrize("metadata", [True, False], ids=["metadata", "library-nodes"])
def test_custom_route_fault_in_one_node_names_its_call(net, custom_proto, metadata):
    """The second RmsNorm node's eps edited: that call is named, with the
    exporter's metadata or, without it, by the library's nodes in call order."""
    model, args = net
    proto = onnx.ModelProto()
    proto.CopyFrom(custom_proto)
    second = [n for n in proto.graph.node if n.op_type == "RmsNorm"][1]
    (eps,) = [a for a in second.attribute if a.name == "eps"]
    eps.f = 0.5
    if not metadata:
        proto = _without_metadata(proto)

    report = opbridge.verify(model, args, onnx_model=proto, **QUICK)

    assert not report.passed
    assert report.first_divergence_op == DIVERGING
    assert [r.status for r in report.operators] == [PASS, FAIL, FAIL]
    how = "the exporter's node metadata" if metadata else "the library's nodes, in call order"
    assert report.operator_mapping == f"available: 3 of 3 calls mapped to ONNX values ({how})"


def _node(op_type, outputs, name, fx_name, domain=""):
    node = onnx.helper.make_node(op_type, ["x"], outputs, name=name, domain=domain)
    entry = node.metadata_props.add()
    entry.key = "pkg.torch.onnx.fx_node"
    entry.value = (
        f"%{fx_name} : [num_users=2] = call_function[target=torch.ops.opbridge."
        "add_rms_norm.default](args = (%x, %r, %w), kwargs = {})"
    )
    return node


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        # custom route: one library node, named after its last output
        ([("AddRmsNorm", ["y", "s"], "node_add_rms_norm__1", "opbridge")], [(0, "y"), (1, "s")]),
        # standard route: a node per output
        (
            [
                ("Add", ["s"], "node_add_rms_norm__1", ""),
                ("Mul", ["y"], "node_add_rms_norm__0", ""),
            ],
            [(0, "y"), (1, "s")],
        ),
        # ort route: the fused node's last output is the call's output 1; its others are not known
        (
            [("SkipSimplifiedLayerNormalization", ["y", "", "", "s"], "node_add_rms_norm__1", "")],
            [(1, "s")],
        ),
    ],
    ids=["library-node", "decomposition", "fused-node"],
)
def test_map_calls_finds_each_output_of_a_call(nodes, expected):
    graph = onnx.helper.make_graph(
        [_node(t, o, n, "add_rms_norm", d) for t, o, n, d in nodes], "g", [], []
    )
    found, how = map_calls(onnx.helper.make_model(graph))
    assert how == "the exporter's node metadata"
    (call,) = found["opbridge::add_rms_norm"]
    assert call.values == expected and call.exact
