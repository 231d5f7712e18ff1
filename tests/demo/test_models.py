"""The built-in demo models: export by both routes and exporters, run in ORT."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import opbridge
from opbridge.demo.models import DEMO_MODELS

from ort_helpers import LEVELS, run

EXPECTED_CUSTOM = {
    "llama_block": {"RmsNorm": 1, "RotaryEmbedding": 2, "AddRmsNorm": 1, "BiasGelu": 1},
    "vision": {"NormalizeImage": 1, "ScaledClamp": 2},
}


@pytest.mark.parametrize("name", list(DEMO_MODELS))
@pytest.mark.parametrize("route", ["custom", "standard"])
@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_demo_model_exports_and_matches(name, route, exporter):
    model, args = DEMO_MODELS[name](seed=0)
    proto = opbridge.export.export(
        model,
        args,
        route=route,
        opset=18,
        dynamo=exporter == "dynamo",
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},),
    )
    onnx.checker.check_model(proto, full_check=True)
    counts = {}
    for node in proto.graph.node:
        if node.domain == "opbridge":
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    assert counts == (EXPECTED_CUSTOM[name] if route == "custom" else {})
    for batch in (1, 7):
        _, (example,) = DEMO_MODELS[name](seed=1, batch=batch)
        with torch.no_grad():
            expected = model(example).numpy()
        for level in LEVELS:
            (got,) = run(proto, [example.numpy()], level)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=level)


def test_demo_models_train_one_step():
    for build in DEMO_MODELS.values():
        model, (x,) = build(seed=0)
        model.train()
        out = model(x)
        out.pow(2).mean().backward()
        grads = [p.grad for p in model.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("route", ["custom", "standard"])
def test_llama_block_with_dynamic_batch_and_sequence(route):
    model, (x,) = DEMO_MODELS["llama_block"](seed=0)
    dims = {0: torch.export.Dim("batch", min=1, max=64), 1: torch.export.Dim("seq", min=2, max=256)}
    proto = opbridge.export.export(model, (x,), route=route, dynamic_shapes=(dims,))
    for batch, seq in ((1, 5), (3, 77)):
        xb = torch.randn(batch, seq, x.shape[-1])
        with torch.no_grad():
            expected = model(xb).numpy()
        (got,) = run(proto, [xb.numpy()])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
