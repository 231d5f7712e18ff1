"""float64 through both routes: the standard route computes float64 exactly
in ONNX Runtime at every optimization level or refuses at export, verify's
float64 tolerance catches a float32-sized error, and the custom route's
float attributes are float32 (documented)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import opbridge
from opbridge.export import ExportError
from opbridge.runtimes.onnxruntime import available_levels
from opbridge.verify import default_session_factory

from op_cases import OPS
from ort_helpers import run

# Two float64 computations of the same formula agree to a few ulps; an
# epsilon of 1e-5 in place of the model's (ONNX Runtime's fused
# SimplifiedLayerNormalization) or a float32 constant is orders above it.
EXACT = 1e-12


class Norms(torch.nn.Module):
    def __init__(self, eps):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.eps = eps
        self.w = torch.nn.Parameter(torch.rand(16, generator=g, dtype=torch.float64) + 0.5)
        self.b = torch.nn.Parameter(torch.randn(16, generator=g, dtype=torch.float64) * 0.1)
        self.fc = torch.nn.Linear(16, 16, dtype=torch.float64)

    def forward(self, x):
        y = opbridge.rms_norm(x, self.w, eps=self.eps)
        out, residual = opbridge.add_rms_norm(self.fc(y), x, self.w, self.b, eps=self.eps)
        return out, residual


CONFIGS = [("dynamo", 18), ("dynamo", 20), ("dynamo", 23), ("dynamo", 26), ("legacy", 17)]


def _outputs_at_every_level(proto, x):
    results = {}
    for level in available_levels():
        sess = default_session_factory(proto.SerializeToString(), level)
        results[level] = sess.run(None, {sess.get_inputs()[0].name: x})
    return results


@pytest.mark.parametrize("eps", [0.1, 1e-6])
@pytest.mark.parametrize(("exporter", "opset"), CONFIGS)
def test_standard_route_rms_norms_are_exact_in_float64(exporter, opset, eps):
    model = Norms(eps).eval()
    x = torch.randn(5, 16, dtype=torch.float64) * 2
    proto = opbridge.export.export(
        model, (x,), route="standard", opset=opset, dynamo=exporter == "dynamo"
    )
    with torch.no_grad():
        expected = [t.numpy() for t in model(x)]
    for level, got in _outputs_at_every_level(proto, x.numpy()).items():
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=EXACT, atol=EXACT, err_msg=level)


class BiasGelu(torch.nn.Module):
    def __init__(self, approximate):
        super().__init__()
        self.approximate = approximate
        self.b = torch.nn.Parameter(torch.linspace(-1, 1, 16, dtype=torch.float64))

    def forward(self, x):
        return opbridge.bias_gelu(x, self.b, approximate=self.approximate)


@pytest.mark.parametrize(("exporter", "opset"), CONFIGS)
def test_standard_route_bias_gelu_tanh_is_exact_in_float64(exporter, opset):
    model = BiasGelu("tanh").eval()
    x = torch.randn(5, 16, dtype=torch.float64) * 3
    proto = opbridge.export.export(
        model, (x,), route="standard", opset=opset, dynamo=exporter == "dynamo"
    )
    with torch.no_grad():
        expected = model(x).numpy()
    for level, (got,) in _outputs_at_every_level(proto, x.numpy()).items():
        np.testing.assert_allclose(got, expected, rtol=EXACT, atol=EXACT, err_msg=level)


@pytest.mark.parametrize(("exporter", "opset"), CONFIGS)
def test_standard_route_refuses_float64_erf_gelu_naming_the_alternative(exporter, opset):
    x = torch.randn(5, 16, dtype=torch.float64)
    with pytest.raises(ExportError) as info:
        opbridge.export.export(
            BiasGelu("none").eval(),
            (x,),
            route="standard",
            opset=opset,
            dynamo=exporter == "dynamo",
        )
    message = str(info.value)
    for part in ("opbridge::bias_gelu", "float64", "approximate='none'", f"opset {opset}"):
        assert part in message, message
    assert "route='custom'" in message
    # The custom route runs it.
    proto = opbridge.export.export(BiasGelu("none").eval(), (x,), route="custom", opset=opset)
    (got,) = run(proto, [x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(got, BiasGelu("none")(x).numpy(), rtol=EXACT, atol=EXACT)


def test_float32_keeps_the_fused_forms():
    model = Norms(1e-5).float().eval()
    x = torch.randn(5, 16)
    ops = {
        n.op_type
        for n in opbridge.export.export(model, (x,), route="standard", opset=23).graph.node
    }
    assert "RMSNormalization" in ops
    ops = {
        n.op_type
        for n in opbridge.export.export(model, (x,), route="standard", opset=18).graph.node
    }
    assert "Pow" in ops  # the chain ONNX Runtime fuses into SimplifiedLayerNormalization


class _Off:
    """A session whose outputs are off by a factor of (1 + ``relative``)."""

    def __init__(self, session, relative):
        self.session, self.relative = session, relative

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feed):
        return [out * (1 + self.relative) for out in self.session.run(names, feed)]


class Scale(torch.nn.Module):
    def forward(self, x):
        return opbridge.scaled_clamp(x, 0.5, -10.0, 10.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_verify_float64_tolerance_catches_a_float32_sized_error(dtype):
    # ONNX Runtime's fused float64 RMSNorm (epsilon 1e-5 for the model's 1e-6)
    # was off by about 4.5e-6 relative: within the float32 tolerance
    # (1e-5 + 1e-5 * |y|), far outside float64's.
    x = torch.randn(4, 16, dtype=dtype)

    def factory(model_bytes, level):
        return _Off(default_session_factory(model_bytes, level), 4.5e-6)

    report = opbridge.verify(
        Scale(), (x,), route="custom", session_factory=factory, layers=False, draws=1
    )
    assert report.passed == (dtype == torch.float32), report.failures()
    if dtype == torch.float64:
        assert (report.rtol_float64, report.atol_float64) == (1e-7, 1e-7)
        assert "(float64: 1e-07, 1e-07)" in str(report)


def test_custom_route_float_attributes_are_float32_in_onnx_runtime():
    # Documented (docs/guides/export-and-routes.md, float64): an ONNX FLOAT
    # attribute holds a float32, so ONNX Runtime clamps at float32(0.1); the
    # standard route's float64 constants carry 0.1 exactly.
    class Clamp(torch.nn.Module):
        def forward(self, x):
            return opbridge.scaled_clamp(x, 1.0, 0.1, 0.7)

    x = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    (custom,) = run(opbridge.export.export(Clamp(), (x,), route="custom"), [x.numpy()])
    assert custom[0] == float(np.float32(0.1)) != 0.1
    (standard,) = run(opbridge.export.export(Clamp(), (x,), route="standard"), [x.numpy()])
    np.testing.assert_array_equal(standard, OPS["scaled_clamp"].reference(x, 1.0, 0.1, 0.7))
