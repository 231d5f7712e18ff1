"""An operator opbridge did not build (a torch.library.custom_op), adopted by
registering its card: it exports by the standard route through PyTorch's own
exporters (both) and opbridge.export.export, and by the function route
through opbridge.export.export; runs in a stock ONNX Runtime; verifies (route
"auto" too); gets samples drawn from its schema; patches into a model by a
user's rule; and is refused by the custom route with an error that names it.
In a process of its own: the card and the operator stay registered."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import io, json
import numpy as np, onnx, onnxruntime, torch
import opbridge
from opbridge.ops.adopted import UnsupportedSchemaError, schema_spec


@torch.library.custom_op("mylib::softclip", mutates_args=())
def softclip(x: torch.Tensor, limit: float = 3.0) -> torch.Tensor:
    return limit * torch.tanh(x / limit)


@softclip.register_fake
def _(x, limit=3.0):
    return torch.empty_like(x)


def standard(b, x, limit=3.0):
    c = b.constant(limit, like=x)
    return b.op("Mul", b.op("Tanh", b.op("Div", x, c)), c)


# Only what the op needs to export and verify: no samples, no bench inputs.
opbridge.ops.register_card(
    opbridge.ops.Card(
        name="softclip",
        namespace="mylib",
        call=torch.ops.mylib.softclip,
        standard=standard,
        reference=lambda x, limit=3.0: limit * torch.tanh(x / limit),
    )
)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.ops.mylib.softclip(x * 2.0, 2.5)


model, x = Model().eval(), torch.randn(3, 5)
want = model(x).numpy()
found = {"spec": schema_spec("mylib", "softclip")}
for dynamo in (True, False):
    with opbridge.export.route("standard"):
        buffer = io.BytesIO()
        torch.onnx.export(model, (x,), buffer, dynamo=dynamo, input_names=["x"])
    proto = onnx.load_from_string(buffer.getvalue())
    (got,) = onnxruntime.InferenceSession(buffer.getvalue()).run(None, {"x": x.numpy()})
    try:
        torch.onnx.export(model, (x,), io.BytesIO(), dynamo=dynamo)
        refusal = None
    except Exception as error:
        cause = error
        while cause is not None and type(cause).__name__ != "ExportError":
            cause = cause.__cause__ or cause.__context__
        refusal = str(cause) if cause is not None else repr(error)
    found[str(dynamo)] = {
        "domains": sorted({n.domain for n in proto.graph.node}),
        "types": sorted({n.op_type for n in proto.graph.node} - {"Constant"}),
        "error": float(np.abs(got - want).max()),
        "refusal": refusal,
    }
proto = opbridge.export.export(model, (x,), route="standard")
found["export"] = sorted({n.op_type for n in proto.graph.node} - {"Constant"})
found["verify"] = opbridge.verify(model, (x,), route="standard", layers=False).passed

# The function route: a node of the op's namespace with a standard-op body,
# which a stock session runs (no library), by both exporters.
found["function"] = {}
for dynamo in (True, False):
    proto = opbridge.export.export(model, (x,), route="function", dynamo=dynamo)
    session = onnxruntime.InferenceSession(proto.SerializeToString())
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    found["function"][str(dynamo)] = {
        "nodes": sorted(f"{n.domain}::{n.op_type}" for n in proto.graph.node if n.domain),
        "functions": [f"{f.domain}::{f.name}" for f in proto.functions],
        "error": float(np.abs(got - want).max()),
    }
report = opbridge.verify(model, (x,), route="function")
found["verify_function"] = [report.passed, [o.op for o in report.operators]]
found["verify_auto"] = opbridge.verify(model, (x,), route="auto", layers=False).passed

# Samples and benchmark inputs drawn from the schema (the card has none).
card = opbridge.ops.card("mylib::softclip")
found["check_card"] = opbridge.ops.check_card(card)
found["samples"] = [
    [s.label, [list(a.shape) if isinstance(a, torch.Tensor) else a for a in s.args]]
    for s in card.samples(torch.float32, large=False)
]
found["bench_inputs"] = [
    list(a.shape) if isinstance(a, torch.Tensor) else a
    for a in card.bench_inputs([2, 8], torch.float32)
]
found["composite_is_reference"] = card.composite is card.reference


# Patched into a model by a rule of the user's own.
class SoftClip(torch.nn.Module):
    def forward(self, x):
        return 2.5 * torch.tanh(x / 2.5)


class Adopted(torch.nn.Module):
    def forward(self, x):
        return torch.ops.mylib.softclip(x, 2.5)


def rule(parent, name, child):
    return {name: Adopted()} if isinstance(child, SoftClip) else None


net = torch.nn.Sequential(torch.nn.Linear(5, 5), SoftClip()).eval()
expected = net(x)
opbridge.patch(net, rules=[rule])
found["patched"] = [type(m).__name__ for m in net] + [float((net(x) - expected).abs().max())]
found["patched_verify"] = opbridge.verify(net, (x,), route="function", layers=False).passed


# An operator defined the way TORCH_LIBRARY defines one in C++ (a schema
# string, then a kernel), with an optional tensor input.
library = torch.library.Library("mylib", "FRAGMENT")
library.define("scale_shift(Tensor x, Tensor? w=None, float shift=0.0) -> Tensor")
library.impl(
    "scale_shift",
    lambda x, w=None, shift=0.0: (x if w is None else x * w) + shift,
    "CompositeExplicitAutograd",
)
torch.library.register_fake("mylib::scale_shift")(lambda x, w=None, shift=0.0: torch.empty_like(x))


def scale_shift_standard(b, x, w=None, shift=0.0):
    scaled = x if w is None else b.op("Mul", x, w)
    return b.op("Add", scaled, b.constant(shift, like=x))


opbridge.ops.register_card(
    opbridge.ops.Card(
        name="scale_shift",
        namespace="mylib",
        call=torch.ops.mylib.scale_shift,
        standard=scale_shift_standard,
        reference=lambda x, w=None, shift=0.0: (x if w is None else x * w) + shift,
    )
)


class Shifted(torch.nn.Module):
    def forward(self, x, w):
        return torch.ops.mylib.scale_shift(x, w, 0.5) + torch.ops.mylib.scale_shift(x, None, 1.0)


w = torch.randn(5)
shifted = {}
for dynamo in (True, False):
    with opbridge.export.route("standard"):
        buffer = io.BytesIO()
        torch.onnx.export(Shifted(), (x, w), buffer, dynamo=dynamo, input_names=["x", "w"])
    (got,) = onnxruntime.InferenceSession(buffer.getvalue()).run(
        None, {"x": x.numpy(), "w": w.numpy()}
    )
    shifted[str(dynamo)] = float(np.abs(got - Shifted()(x, w).numpy()).max())
found["library_op"] = {
    "spec": schema_spec("mylib", "scale_shift"),
    "errors": shifted,
    "verify": opbridge.verify(Shifted(), (x, w), route="standard", layers=False).passed,
}


# A weight of the last dimension: samples drawn in the second layout. A
# scalar without a default: none drawn, and check_card says why.
library.define("row_scale(Tensor x, Tensor w, float eps=0.0) -> Tensor")
library.impl(
    "row_scale",
    lambda x, w, eps=0.0: x * w.expand(x.shape[-1:]) + eps,  # w: one value per column
    "CompositeExplicitAutograd",
)
library.define("row_shift(Tensor x, Tensor w, float eps) -> Tensor")
library.impl("row_shift", lambda x, w, eps: x + w + eps, "CompositeExplicitAutograd")
for name, reference in (
    ("row_scale", lambda x, w, eps=0.0: x * w + eps),
    ("row_shift", lambda x, w, eps: x + w + eps),
):
    opbridge.ops.register_card(
        opbridge.ops.Card(
            name=name,
            namespace="mylib",
            call=getattr(torch.ops.mylib, name),
            standard=None,
            reference=reference,
        )
    )
row_scale = opbridge.ops.card("mylib::row_scale")


def shapes(args):
    return [list(a.shape) if isinstance(a, torch.Tensor) else a for a in args]


found["drawn"] = {
    "row_scale": [shapes(s.args) for s in row_scale.samples(large=False)][:2],
    "row_shift": opbridge.ops.check_card(opbridge.ops.card("mylib::row_shift")),
    "scale_shift": [s.label for s in opbridge.ops.card("mylib::scale_shift").samples(large=False)],
}


@torch.library.custom_op("mylib::pair", mutates_args=())
def pair(x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    return x.clone()


try:
    schema_spec("mylib", "pair")
    found["unsupported"] = None
except UnsupportedSchemaError as error:
    found["unsupported"] = str(error)
print(json.dumps(found))
"""


def test_a_custom_op_with_a_card_exports_verifies_and_names_what_it_cannot_do():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["spec"]["inputs"] == [{"name": "x", "optional": False}]
    assert found["spec"]["attrs"] == [{"name": "limit", "type": "float", "default": 3.0}]
    assert found["spec"]["onnx_type"] == "Softclip"
    for dynamo in ("True", "False"):
        exported = found[dynamo]
        assert exported["domains"] == [""], exported
        assert exported["types"] == ["Div", "Mul", "Tanh"], exported
        assert exported["error"] <= 1e-6, exported
        assert exported["refusal"].startswith("mylib::softclip: the custom route writes"), exported
        assert "route='standard'" in exported["refusal"], exported
    assert found["export"] == ["Div", "Mul", "Tanh"]
    assert found["verify"] is True
    for dynamo in ("True", "False"):
        function = found["function"][dynamo]
        assert function["nodes"] == ["mylib::Softclip"], function
        assert function["functions"] == ["mylib::Softclip"], function
        assert function["error"] <= 1e-6, function
    assert found["verify_function"] == [True, ["mylib::softclip"]]
    assert found["verify_auto"] is True
    assert found["check_card"] == []
    assert found["samples"] == [
        ["typical", [[4, 16], 3.0]],
        ["one element", [[1, 1], 3.0]],
        ["3-d", [[2, 3, 5], 3.0]],
        ["odd width", [[3, 7], 3.0]],
    ]
    assert found["bench_inputs"] == [[2, 8], 3.0]
    assert found["composite_is_reference"] is True
    drawn = found["drawn"]
    assert drawn["row_scale"] == [[[4, 16], [16], 0.0], [[1, 1], [1], 0.0]]
    (problem,) = [p for p in drawn["row_shift"] if "samples" in p]
    assert problem.startswith("mylib::row_shift: no samples can be drawn from its schema"), problem
    assert "argument(s) eps have no default" in problem, problem
    assert drawn["scale_shift"][:2] == ["typical", "optional inputs given"]
    assert found["patched"][:2] == ["Linear", "Adopted"]
    assert found["patched"][2] <= 1e-6
    assert found["patched_verify"] is True
    assert "mylib::pair: argument 'sizes' is a List[int]" in found["unsupported"]
    # A schema defined as TORCH_LIBRARY defines one, with an optional input.
    library_op = found["library_op"]
    assert library_op["spec"]["inputs"] == [
        {"name": "x", "optional": False},
        {"name": "w", "optional": True},
    ]
    assert library_op["spec"]["attrs"] == [{"name": "shift", "type": "float", "default": 0.0}]
    assert all(error <= 1e-6 for error in library_op["errors"].values()), library_op
    assert library_op["verify"] is True
