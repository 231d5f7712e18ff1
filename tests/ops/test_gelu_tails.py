"""bias_gelu far into its tails, at every SIMD target and dtype, against a
float64 reference computed without cancellation.

The tanh form written as 0.5 v (1 + tanh(u)) cancels where tanh(u) is close
to -1: the SIMD kernel once gave -1.19e-3 at v = -1e4 and -1.19e-5 at v = -100
where the value is 0 (F.gelu gives 0 there too)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from onnx import TensorProto

import opbridge
from opbridge import _C

from ort_helpers import single_node_model

TARGETS = _C.simd_targets()
# Large, moderate, small, subnormal and signed-zero inputs of both signs.
MAGNITUDES = [1e4, 1e3, 100.0, 30.0, 10.0, 8.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 1e-3, 1e-30]
VALUES = [*sorted({s * m for m in MAGNITUDES for s in (-1.0, 1.0)}), 0.0, -0.0]
# Relative tolerance, and the absolute one near 0: float32's erf form holds
# its tail to its rational erf's absolute error (2.4e-7 at v = -5), so 1e-6;
# the cancellation this guards against was 1.19e-5 and 1.19e-3.
TOL = {
    torch.float64: (1e-12, 1e-15),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-4),
}


def gelu_ref(v: float, approximate: str) -> float:
    """gelu in float64 without cancellation: v * Phi(v) with Phi from erfc,
    or v * sigmoid(2 u) for the tanh form."""
    if approximate == "tanh":
        u = math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)
        return v / (1.0 + math.exp(-2.0 * u)) if -2.0 * u < 700 else 0.0 * v
    return v * 0.5 * math.erfc(-v / math.sqrt(2.0))


def gelu_grad_ref(v: float, approximate: str) -> float:
    if approximate == "tanh":
        u = math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)
        if -2.0 * u >= 700:
            return 0.0
        s = 1.0 / (1.0 + math.exp(-2.0 * u))
        du = math.sqrt(2.0 / math.pi) * (1.0 + 3.0 * 0.044715 * v * v)
        return s + v * 2.0 * s * (1.0 - s) * du
    return 0.5 * math.erfc(-v / math.sqrt(2.0)) + v * math.exp(-0.5 * v * v) / math.sqrt(
        2.0 * math.pi
    )


def _check(got: torch.Tensor, inputs: torch.Tensor, ref, dtype, approximate, what):
    rtol, atol = TOL[dtype]
    for v, g in zip(inputs.double().tolist(), got.double().tolist(), strict=True):
        want = ref(v, approximate)
        assert math.isfinite(g), f"{what} at {v}: {g}"
        assert abs(g - want) <= atol + rtol * abs(want), (
            f"bias_gelu({approximate}) {what} at v = {v!r} ({dtype}): got {g!r}, float64 {want!r}"
        )


@pytest.fixture
def target(request):
    _C.set_simd_target(request.param)
    yield request.param
    _C.set_simd_target("")


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_tails_forward_and_backward(target, dtype, approximate):
    # Rows long enough for a full vector and a tail at every width.
    x = torch.tensor(VALUES, dtype=torch.float64).repeat(3).to(dtype).reshape(3, -1)
    if dtype in (torch.float16, torch.bfloat16):  # beyond their range or precision
        x = x.clamp(-6e4, 6e4)
    x.requires_grad_()
    bias = torch.zeros(x.shape[1], dtype=dtype)
    y = opbridge.bias_gelu(x, bias, approximate=approximate)
    (grad,) = torch.autograd.grad(y.sum(), x)
    flat = x.detach().flatten()
    _check(y.detach().flatten(), flat, gelu_ref, dtype, approximate, f"forward at {target}")
    _check(grad.flatten(), flat, gelu_grad_ref, dtype, approximate, f"backward at {target}")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_far_negative_tail_is_zero_as_in_pytorch(approximate):
    x = torch.tensor([-1e4, -1e3, -100.0])
    y = opbridge.bias_gelu(x, torch.zeros(3), approximate=approximate)
    assert y.abs().max().item() == 0.0
    torch.testing.assert_close(
        y, torch.nn.functional.gelu(x, approximate=approximate), atol=0.0, rtol=0.0
    )


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_tails_in_onnx_runtime(approximate):
    x = torch.tensor(VALUES, dtype=torch.float32).reshape(1, -1)
    bias = torch.zeros(x.shape[1])
    model = single_node_model(
        "BiasGelu",
        [("x", TensorProto.FLOAT, list(x.shape)), ("bias", TensorProto.FLOAT, [x.shape[1]])],
        {"approximate": approximate},
    )
    session = opbridge.runtimes.onnxruntime.InferenceSession(model)
    (got,) = session.run(None, {"x": x.numpy(), "bias": bias.numpy()})
    _check(
        torch.from_numpy(np.asarray(got)).flatten(),
        x.flatten(),
        gelu_ref,
        torch.float32,
        approximate,
        "ONNX Runtime forward",
    )
