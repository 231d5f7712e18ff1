"""Every operator by every route: the node types each route and opset must
produce, the model valid, and ONNX Runtime equal to PyTorch with graph
optimizations off and on, at the export batch and at batch 1 of a dynamic
batch dimension. The standard and ort routes run in a stock ONNX Runtime
session (no opbridge library registered)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

import opbridge
from opbridge.export.contrib import MICROSOFT, check_model

from op_cases import OPS, as_tuple

LEVELS = (
    onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
)
# (exporter, opset, route); the legacy exporter stops at opset 20.
CONFIGS = [
    ("dynamo", 18, "standard"),
    ("dynamo", 23, "standard"),
    ("dynamo", 18, "custom"),
    ("dynamo", 18, "ort"),
    ("dynamo", 23, "ort"),
    ("legacy", 18, "standard"),
    ("legacy", 18, "custom"),
    ("legacy", 18, "ort"),
]
CONFIG_IDS = ["-".join(map(str, c)) for c in CONFIGS]

# The fused node (domain, op_type) each op becomes for float32, by route and
# opset: "standard23" is the standard route at opset >= 23, "standard" below it.
FUSED = {
    "rms_norm": {
        "standard23": ("", "RMSNormalization"),
        "ort": ("", "SimplifiedLayerNormalization"),
    },
    "add_rms_norm": {
        "standard23": ("", "RMSNormalization"),
        "ort": (MICROSOFT, "SkipSimplifiedLayerNormalization"),
    },
    "layer_norm": {
        "standard": ("", "LayerNormalization"),
        "standard23": ("", "LayerNormalization"),
        "ort": ("", "LayerNormalization"),
    },
    "add_layer_norm": {
        "standard": ("", "LayerNormalization"),
        "standard23": ("", "LayerNormalization"),
        "ort": (MICROSOFT, "SkipLayerNormalization"),
    },
    "bias_gelu": {"standard23": ("", "Gelu")},
    "rotary_embedding": {
        "standard23": ("", "RotaryEmbedding"),
        "ort": (MICROSOFT, "RotaryEmbedding"),
    },
}


class _Call(torch.nn.Module):
    def __init__(self, call, sample):
        super().__init__()
        self.call, self.sample = call, sample

    def forward(self, *tensors):
        given = iter(tensors)
        args = [next(given) if isinstance(a, torch.Tensor) else a for a in self.sample.args]
        return self.call(*args, **self.sample.kwargs)


def _fused_expected(name: str, sample, route: str, opset: int) -> tuple[str, str] | None:
    if route == "custom":
        return None
    key = "standard23" if route == "standard" and opset >= 23 else route
    if name == "bias_gelu" and route == "ort":
        positional = sample.args[2] if len(sample.args) > 2 else "none"
        approximate = sample.kwargs.get("approximate", positional)
        return (MICROSOFT, "FastGelu" if approximate == "tanh" else "BiasGelu")
    return FUSED.get(name, {}).get(key)


def _samples(name: str, exporter: str):
    samples = list(OPS[name].samples(torch.float32, large=False))
    if exporter == "dynamo":
        # The dynamo exporter is slow: the typical samples.
        samples = [s for s in samples if s.label.startswith("typical")]
    return samples


def _batched(tensors: tuple) -> bool:
    return tensors[0].dim() > 0 and tensors[0].shape[0] > 1


def _session(proto, route: str, level):
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = level
    if route == "custom":
        return opbridge.runtimes.onnxruntime.InferenceSession(proto, sess_options=options)
    return onnxruntime.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize(("exporter", "opset", "route"), CONFIGS, ids=CONFIG_IDS)
def test_route(name, exporter, opset, route):
    card = OPS[name]
    library_nodes = set()
    for sample in _samples(name, exporter):
        tensors = tuple(a.detach() for a in sample.args if isinstance(a, torch.Tensor))
        model = _Call(card.call, sample).eval()
        dynamic = _batched(tensors)
        proto = opbridge.export.export(
            model,
            tensors,
            route=route,
            opset=opset,
            dynamo=exporter == "dynamo",
            dynamic_batch=dynamic,
        )
        check_model(proto, full_check=True)
        nodes = [(n.domain, n.op_type) for n in proto.graph.node]
        library_nodes |= {n for n in nodes if n[0] == "opbridge"}
        if route != "custom":
            assert not any(d == "opbridge" for d, _ in nodes), (sample.label, nodes)
        if route == "standard":
            assert not any(d == MICROSOFT for d, _ in nodes), (sample.label, nodes)
        fused = _fused_expected(name, sample, route, opset)
        if fused is not None:
            assert nodes.count(fused) == 1, (sample.label, fused, nodes)
        if dynamic:
            dim = proto.graph.input[0].type.tensor_type.shape.dim[0]
            assert dim.dim_param, f"{sample.label}: batch not dynamic"
        # At the export batch, and at batch 1 of a dynamic batch.
        batches = [tensors]
        if dynamic:
            batch = tensors[0].shape[0]
            batches.append(tuple(t[:1] if t.dim() and t.shape[0] == batch else t for t in tensors))
        for level in LEVELS:
            session = _session(proto, route, level)
            names = [i.name for i in session.get_inputs()]
            for inputs in batches:
                got = session.run(None, dict(zip(names, [t.numpy() for t in inputs], strict=True)))
                want = as_tuple(model(*inputs))
                assert len(got) == len(want)
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_allclose(
                        g, w.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{sample.label} {level}"
                    )
    if route == "custom":
        assert library_nodes == {("opbridge", opbridge.specs()[name]["onnx_type"])}


@pytest.mark.parametrize("name", ["rms_norm", "add_rms_norm", "bias_gelu", "rotary_embedding"])
def test_ort_route_falls_back_to_the_standard_form_for_float64(name):
    card = OPS[name]
    sample = next(
        s
        for s in card.samples(torch.float64, large=False)
        if "tanh" in s.label or (name != "bias_gelu" and s.label.startswith("typical"))
    )
    tensors = tuple(a.detach() for a in sample.args if isinstance(a, torch.Tensor))
    model = _Call(card.call, sample).eval()
    proto = opbridge.export.export(model, tensors, route="ort", dynamo=False)
    assert not any(n.domain in ("opbridge", MICROSOFT) for n in proto.graph.node)
    assert "SimplifiedLayerNormalization" not in {n.op_type for n in proto.graph.node}
    session = _session(proto, "ort", LEVELS[0])
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, dict(zip(names, [t.numpy() for t in tensors], strict=True)))
    for g, w in zip(got, as_tuple(model(*tensors)), strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-7, atol=1e-7)


def test_unused_outputs_of_fused_nodes_are_dropped():
    card = OPS["add_rms_norm"]
    sample = next(
        s for s in card.samples(torch.float32, large=False) if s.label.startswith("typical")
    )
    tensors = tuple(a.detach() for a in sample.args if isinstance(a, torch.Tensor))

    class OnlyOut(torch.nn.Module):
        def forward(self, *t):
            return card.call(*t, **sample.kwargs)[0]

    proto = opbridge.export.export(OnlyOut(), tensors, route="ort")
    (node,) = [n for n in proto.graph.node if n.op_type == "SkipSimplifiedLayerNormalization"]
    assert len(node.output) == 1 and node.output[0]


def test_route_dict_mixes_routes_and_is_recorded():
    model = opbridge.nn.RMSNorm(16)
    x = torch.randn(2, 16)

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = model

        def forward(self, x, bias):
            return opbridge.ops.bias_gelu(self.norm(x), bias)

    proto = opbridge.export.export(
        Two(), (x, torch.randn(16)), route={"rms_norm": "ort", "opbridge::bias_gelu": "custom"}
    )
    nodes = {(n.domain, n.op_type) for n in proto.graph.node}
    assert ("", "SimplifiedLayerNormalization") in nodes and ("opbridge", "BiasGelu") in nodes
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert metadata["opbridge.route"] == "per-op"
    assert metadata["opbridge.route.opbridge::rms_norm"] == "ort"
    assert metadata["opbridge.route.opbridge::bias_gelu"] == "custom"
    with pytest.raises(ValueError, match="route for 'rms_norm' must be one of"):
        opbridge.export.export(model, (x,), route={"rms_norm": "auto"})


# ---------------------------------------------------------------- route="auto"


class _NormGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = opbridge.nn.RMSNorm(16)
        self.bias = torch.nn.Parameter(torch.randn(16))

    def forward(self, x):
        return opbridge.ops.bias_gelu(self.norm(x), self.bias) + self.norm(x * 2)


def _fake_timer(ms: dict):
    def timer(op, route, model, feeds):
        return ms[(op.split("::")[-1], route)]

    return timer


FAKE_MS = {
    ("rms_norm", "custom"): 3.0,
    ("rms_norm", "standard"): 1.0,
    ("rms_norm", "ort"): 2.0,
    ("bias_gelu", "custom"): 1.0,
    ("bias_gelu", "standard"): 2.0,
    ("bias_gelu", "ort"): 2.0,
}


def test_auto_picks_the_fastest_verified_route_per_op():
    from opbridge.autoroute import choose

    model, x = _NormGelu().eval(), torch.randn(4, 16)
    choice = choose(model, (x,), dynamo=False, timer=_fake_timer(FAKE_MS))
    assert choice.plan == {"opbridge::rms_norm": "standard", "opbridge::bias_gelu": "custom"}
    # rms_norm is called twice with one signature: its time counts twice.
    by_key = {(c.op, c.route): c for c in choice.candidates}
    assert by_key[("opbridge::rms_norm", "standard")].median_ms == 2.0
    assert all(c.verified for c in choice.candidates)
    table = choice.table()
    assert "choice: opbridge::rms_norm: standard, opbridge::bias_gelu: custom" in table

    library_free = choose(
        model, (x,), dynamo=False, requires_library=False, timer=_fake_timer(FAKE_MS)
    )
    assert "custom" not in {c.route for c in library_free.candidates}
    # bias_gelu's standard and ort forms tie at 2 ms: the preference order decides.
    assert library_free.plan == {"opbridge::rms_norm": "standard", "opbridge::bias_gelu": "ort"}


def test_auto_lists_the_ort_route_unmeasured_for_an_op_without_an_ort_form():
    from opbridge.autoroute import choose

    model, x = opbridge.nn.LayerNorm(16).eval(), torch.randn(4, 16)
    choice = choose(model, (x,), dynamo=False, timer=lambda *_: 1.0)
    by_route = {c.route: c for c in choice.candidates if c.op == "opbridge::layer_norm"}
    ort = by_route["ort"]
    assert not ort.measured and not ort.verified and ort.detail == "no ort form"
    assert ort.median_ms is None and by_route["standard"].measured
    assert choice.plan["opbridge::layer_norm"] != "ort"
    (row,) = [line for line in choice.table().splitlines() if " ort " in line]
    assert "not measured: no ort form" in row
    # A route with a form for no operator (function) gets no row.
    assert "function" not in by_route


def test_auto_never_picks_a_route_that_fails_verification(monkeypatch):
    from opbridge.autoroute import choose
    from opbridge.ops import _card, card, register_card

    def wrong(b, x, weight, bias=None, *, eps):
        return b.op("Mul", x, weight)

    monkeypatch.setattr(_card, "_REGISTERED", dict(_card._REGISTERED))
    register_card(dataclasses.replace(card("rms_norm"), standard=wrong))
    model, x = _NormGelu().eval(), torch.randn(4, 16)
    choice = choose(model, (x,), dynamo=False, timer=_fake_timer(FAKE_MS))
    standard = next(
        c for c in choice.candidates if c.op == "opbridge::rms_norm" and c.route == "standard"
    )
    assert not standard.verified and "verification failed" in standard.detail
    assert choice.plan["opbridge::rms_norm"] == "ort"


def test_auto_export_of_the_demo_model_verifies_and_records_the_choice():
    from opbridge.demo import build_demo

    model, args = build_demo(batch=2, seq=8, dim=64)
    proto = opbridge.export.export(model, args, route="auto", dynamo=False)
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert metadata["opbridge.route"] == "auto"
    chosen = {k: v for k, v in metadata.items() if k.startswith("opbridge.route.")}
    assert chosen and set(chosen.values()) <= {"custom", "standard", "ort"}
    report = opbridge.verify(model, args, onnx_model=proto, layers=False, draws=1)
    assert report.passed, report.failures()


def test_export_cli_auto_without_library_on_the_llama_block(tmp_path, capsys):
    from opbridge.__main__ import main

    factory = tmp_path / "llama.py"
    factory.write_text(
        "from opbridge.demo.models import build_llama_block\n\n\n"
        "def make():\n    model, args = build_llama_block()\n    return model.eval(), args\n"
    )
    out = tmp_path / "llama.onnx"
    status = main(["export", f"{factory}:make", str(out), "--route", "auto", "--no-library"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "median ms" in printed and "choice: " in printed
    assert "verification passed" in printed
    proto = onnx.load(out)
    assert not any(n.domain == "opbridge" for n in proto.graph.node)
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert {metadata[f"opbridge.route.opbridge::{op}"] for op in ("rms_norm", "bias_gelu")} <= {
        "standard",
        "ort",
    }
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.get_inputs()


def test_export_cli_refuses_custom_without_library(tmp_path, capsys):
    from opbridge.__main__ import main

    status = main(["export", "demo", str(tmp_path / "m.onnx"), "--route", "custom", "--no-library"])
    assert status == 2
    assert "--no-library cannot take --route custom" in capsys.readouterr().err


def test_export_cli_dynamic_batch_and_sequence(tmp_path, capsys):
    from opbridge.__main__ import main

    out = tmp_path / "demo.onnx"
    argv = [
        "export",
        "demo",
        str(out),
        "--route",
        "custom",
        "--dynamic-batch",
        "--dynamic-sequence",
    ]
    status = main(argv)
    printed = capsys.readouterr().out
    assert status == 0, printed
    dims = [d.dim_param for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] and dims[1] and not dims[2], dims
