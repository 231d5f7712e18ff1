"""A route is one module and one registry entry: a route registered from
outside (``toy``: a card's form named ``toy`` where it has one, else the
standard form) is exported, verified, chosen among and benched with like a
built-in one, and is gone once unregistered."""

from __future__ import annotations

import pytest
import torch

import opbridge
from opbridge import bench, runtimes
from opbridge.bench.cases import runtime_settings
from opbridge.bench.sessions import route_label
from opbridge.export import routes
from opbridge.ops import Card


def _toy_form(card):
    return None if card is None else card.form("toy")


def _toy_route() -> routes.Route:
    standard = routes.get("standard")
    return routes.Route(
        name="toy",
        needs_library=False,
        library_node=False,
        form=_toy_form,
        own_form=lambda card: True,
        check=standard.check,
        bench_name="toy",
        summary="a card's toy form, else the standard form",
    )


@pytest.fixture
def toy():
    with routes.registered(_toy_route()) as route:
        yield route
    assert "toy" not in routes.names()


def test_the_toy_route_exports_verifies_and_benches(toy):
    assert toy.label == "toy route" and toy.door
    assert "toy" in routes.choices() and "toy" in routes.library_free()
    model = opbridge.nn.RMSNorm(8).eval()
    x = torch.randn(2, 8)
    for dynamo in (True, False):
        proto = opbridge.export.export(model, (x,), route="toy", dynamo=dynamo, verbose=False)
        assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}
        assert {p.key: p.value for p in proto.metadata_props}["opbridge.route"] == "toy"
        report = opbridge.verify(model, (x,), onnx_model=proto, draws=1, layers=False)
        assert report.passed, report.failures()
    # Per operator, and through PyTorch's own exporter.
    per_op = opbridge.export.export(model, (x,), route={"rms_norm": "toy"}, dynamo=False)
    metadata = {p.key: p.value for p in per_op.metadata_props}
    assert metadata["opbridge.route.opbridge::rms_norm"] == "toy"
    with opbridge.export.route("toy"):
        plain = torch.onnx.export(model, (x,), dynamo=True, verbose=False).model_proto
    assert {n.domain for n in plain.graph.node} <= {"", "ai.onnx"}
    # route="auto" measures it; bench exports, names and times it.
    choice = opbridge.autoroute.choose(model, (x,), dynamo=False, timer=lambda *_: 1.0)
    assert "toy" in [c.route for c in choice.candidates]
    runtime = runtimes.get("onnxruntime")
    assert runtime_settings(runtime)["ort_toy"] == ("toy", runtime.default_level)
    assert route_label("toy") == "toy route"
    case = bench.OpCase("rms_norm")
    args = case.inputs([4, 64], torch.float32)
    onnx_bytes = bench.export_onnx(case.module(args), bench.tensors_of(args), route="toy")
    session = runtime.session(onnx_bytes, threads=1)
    feeds = dict(zip([i.name for i in session.get_inputs()], bench.tensors_of(args), strict=True))
    feeds = {name: tensor.numpy() for name, tensor in feeds.items()}
    timing = bench.time_call(session.run, None, feeds, warmup=1, iters=2, budget_s=0)
    assert timing.median_us > 0


def test_a_card_reads_the_form_of_a_registered_route_from_its_module():
    def reference(x):
        return x

    def toy(b, x):
        return b.op("Identity", x)

    module = {"reference": reference, "standard": reference, "toy": toy}
    before = Card.of_module(module, name="shift", namespace="toyops", call=reference)
    assert before.form("toy") is None
    with routes.registered(_toy_route()):
        assert before.form("toy") is toy  # a card made before the route
        after = Card.of_module(module, name="shift", namespace="toyops", call=reference)
        assert after.forms == {"toy": toy}
        assert routes.get("toy").form(after) is toy
    assert before.form("toy") is None and after.forms == {}


def test_the_default_route_stays_registered():
    with pytest.raises(ValueError, match="default route"):
        routes.unregister_route(routes.DEFAULT)
    with pytest.raises(ValueError, match="route must be one of"):
        routes.unregister_route("toy")
