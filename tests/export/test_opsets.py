"""Every opset opbridge.export.export accepts gives a model that imports that
opset, passes onnx.checker and loads and computes in ONNX Runtime; any other
opset, or a conversion that fails, is an error at export."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import opbridge
from opbridge.export import OPSET_RANGES, ExportError

from ort_helpers import run


class AllOps(torch.nn.Module):
    """Every operator, over x [batch, seq, heads, head_dim]."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.rand(8, generator=g) + 0.5)
        self.b = torch.nn.Parameter(torch.randn(8, generator=g) * 0.1)
        angles = torch.arange(3 * 4, dtype=torch.float32).reshape(3, 4) * 0.3
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, x):
        r = opbridge.rotary_embedding(x, self.cos, self.sin)
        h = opbridge.rms_norm(r, self.w, self.b, eps=1e-5)
        h, residual = opbridge.add_rms_norm(h, x, self.w, eps=1e-5)
        h = opbridge.bias_gelu(h, self.b, approximate="tanh")
        h = opbridge.bias_gelu(h, self.b)
        y = opbridge.scaled_clamp(h + residual, 1.5, min_val=-1.0, max_val=2.0)
        # x read as an NHWC image with 8 channels.
        image = opbridge.normalize_image(x * 40 + 128, [0.5] * 8, [0.25] * 8)
        return y, image


def _opsets(exporter):
    low, high = OPSET_RANGES[exporter]
    return [(exporter, opset) for opset in range(low, high + 1)]


@pytest.mark.parametrize("route", ["standard", "custom"])
@pytest.mark.parametrize(("exporter", "opset"), _opsets("dynamo") + _opsets("legacy"))
def test_every_accepted_opset_loads_and_computes(exporter, opset, route):
    model = AllOps().eval()
    x = torch.randn(2, 3, 2, 8)
    proto = opbridge.export.export(
        model, (x,), route=route, opset=opset, dynamo=exporter == "dynamo"
    )
    imports = {imp.domain: imp.version for imp in proto.opset_import}
    assert imports.get("", imports.get("ai.onnx")) == opset
    onnx.checker.check_model(proto, full_check=True)
    with torch.no_grad():
        expected = [t.numpy() for t in model(x)]
    for level in ("disable_all", "enable_all"):
        got = run(proto, [x.numpy()], level)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=level)


@pytest.mark.parametrize(
    ("opset", "dynamo"), [(14, True), (27, True), (12, False), (21, False), (0, True)]
)
def test_opset_outside_the_range_is_refused_naming_it(opset, dynamo):
    low, high = OPSET_RANGES["dynamo" if dynamo else "legacy"]
    with pytest.raises(ValueError, match=rf"opset {opset} is not supported .* {low} to {high}"):
        opbridge.export.export(
            AllOps().eval(), (torch.randn(1, 3, 2, 8),), route="custom", opset=opset, dynamo=dynamo
        )


class Mean(torch.nn.Module):
    def forward(self, x):
        return x.mean(-1)


def test_a_failed_conversion_is_an_error_naming_the_opset_and_why():
    # torch builds at opset 18 and onnx's converter cannot take torch's own
    # ReduceMean down to 17; torch would keep opset 18 and only log it.
    with pytest.raises(
        ExportError, match=r"asked for opset 17, .* imports ai.onnx opset 18"
    ) as info:
        opbridge.export.export(Mean(), (torch.randn(2, 4),), route="standard", opset=17)
    assert "axes" in str(info.value)  # the converter's reason
    # At the build opset it exports.
    proto = opbridge.export.export(Mean(), (torch.randn(2, 4),), route="standard", opset=18)
    assert {i.domain: i.version for i in proto.opset_import}[""] == 18


def test_opset_version_is_accepted_as_torchs_name():
    model = AllOps().eval()
    x = torch.randn(1, 3, 2, 8)
    proto = opbridge.export.export(model, (x,), route="standard", opset_version=20)
    assert {i.domain: i.version for i in proto.opset_import}[""] == 20
    assert "Gelu" in {n.op_type for n in proto.graph.node}
    proto = opbridge.export.export(model, (x,), route="custom", opset=19, opset_version=19)
    assert {i.domain: i.version for i in proto.opset_import}[""] == 19
    with pytest.raises(TypeError, match=r"opset=19 and opset_version=20; pass one"):
        opbridge.export.export(model, (x,), route="custom", opset=19, opset_version=20)


def test_translation_table_refuses_an_opset_export_does_not_reach():
    with pytest.raises(ValueError, match="opset 13 is not supported with the dynamo exporter"):
        opbridge.export.translation_table("standard", opset=13)
    with pytest.raises(ValueError, match="opset 22 is not supported with the legacy exporter"):
        opbridge.export.register_legacy_symbolics("standard", opset=22)
