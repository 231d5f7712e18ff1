"""An export for a runtime leaves out the ONNX operators it computes wrong
(``ExportOptions.avoid``, from ``Runtime.wrong_forms``), and verify in such a
runtime flags a model that has one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import opbridge
from opbridge import runtimes
from opbridge.autoroute import choose
from opbridge.ops import card
from opbridge.sdk.testing import export_sample

ROTARY = card("rotary_embedding")


def op_types(proto) -> set[str]:
    nodes = [*proto.graph.node, *(n for f in proto.functions for n in f.node)]
    return {f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in nodes}


def typical():
    return next(s for s in ROTARY.samples(torch.float32, large=False) if s.label.startswith("typ"))


@pytest.mark.parametrize(
    ("route", "opset", "fused"),
    [
        ("standard", 23, "RotaryEmbedding"),
        ("ort", 18, "com.microsoft::RotaryEmbedding"),
        ("function", 23, "RotaryEmbedding"),
    ],
)
def test_avoid_takes_the_other_form_and_computes_the_same(route, opset, fused):
    sample = typical()
    proto, module, inputs = export_sample(ROTARY, sample, route=route, opset=opset)
    assert fused in op_types(proto)
    avoided = opbridge.export.export(module, inputs, route=route, opset=opset, avoid={fused})
    assert fused not in op_types(avoided)
    feeds = {i.name: t.numpy() for i, t in zip(avoided.graph.input, inputs, strict=True)}
    (got,) = opbridge.runtimes.onnxruntime.InferenceSession(avoided).run(None, feeds)
    np.testing.assert_allclose(got, module(*inputs).numpy(), rtol=1e-5, atol=1e-5)


@pytest.fixture
def picky_runtime():
    """ONNX Runtime under another name, declaring both RotaryEmbeddings wrong."""
    picky = dataclasses.replace(
        runtimes.get("onnxruntime"),
        name="picky",
        label="Picky Runtime",
        wrong_forms={
            "RotaryEmbedding": "wrong inside attention",
            "com.microsoft::RotaryEmbedding": "wrong with a start offset",
        },
    )
    runtimes.register_runtime(picky)
    yield picky
    runtimes._REGISTERED.pop("picky")


def test_verify_in_a_runtime_exports_without_its_wrong_forms(picky_runtime):
    sample = typical()
    _, module, inputs = export_sample(ROTARY, sample, route="ort")
    report = opbridge.verify(module, inputs, route="ort", runtime="picky", layers=False)
    assert report.passed
    assert "com.microsoft::RotaryEmbedding" not in op_types(report.onnx_model)
    check = next(c for c in report.structure if c.name.startswith("no operator"))
    assert check.status == "pass"


def test_verify_flags_a_given_model_with_a_wrong_form(picky_runtime):
    sample = typical()
    proto, module, inputs = export_sample(ROTARY, sample, route="ort")
    report = opbridge.verify(module, inputs, onnx_model=proto, runtime="picky", layers=False)
    check = next(c for c in report.structure if c.name.startswith("no operator"))
    assert check.status == "warn"
    assert "com.microsoft::RotaryEmbedding: wrong with a start offset" in check.detail


def test_auto_for_a_runtime_measures_and_exports_without_its_wrong_forms(picky_runtime):
    sample = typical()
    _, module, inputs = export_sample(ROTARY, sample, route="custom")
    choice = choose(module, inputs, runtime="picky", requires_library=False)
    assert choice.avoid == picky_runtime.avoid()
    proto = opbridge.export.export(module, inputs, route=choice)
    assert not op_types(proto) & picky_runtime.avoid()
