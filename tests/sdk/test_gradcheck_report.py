"""check_gradcheck's message for a wrong backward: the op, the sample and
the input whose gradient is wrong, not only torch's Jacobian report."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from opbridge.ops import card
from opbridge.sdk.testing import check_gradcheck


class _WrongWeightGrad(torch.autograd.Function):
    """rms_norm whose backward doubles the weight's gradient."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return torch.ops.opbridge.rms_norm(x, weight, None, 1e-6)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        with torch.enable_grad():
            x, weight = x.detach().requires_grad_(), weight.detach().requires_grad_()
            out = torch.ops.opbridge.rms_norm(x, weight, None, 1e-6)
            gx, gw = torch.autograd.grad(out, (x, weight), grad)
        return gx, 2 * gw


def _samples(dtype=torch.float64, requires_grad=False, *, large=False, seed=0):
    from opbridge.ops import Sample

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 8, generator=g, dtype=dtype).requires_grad_(requires_grad)
    w = (torch.rand(8, generator=g, dtype=dtype) + 0.5).requires_grad_(requires_grad)
    yield Sample((x, w), label="typical")


def test_a_wrong_backward_names_the_op_the_sample_and_the_input():
    good = dataclasses.replace(card("opbridge::rms_norm"), samples=_samples)
    check_gradcheck(dataclasses.replace(good, call=torch.ops.opbridge.rms_norm))
    bad = dataclasses.replace(good, call=_WrongWeightGrad.apply)
    with pytest.raises(AssertionError) as raised:
        check_gradcheck(bad)
    message = str(raised.value)
    assert message.startswith("opbridge::rms_norm: gradcheck failed on sample 0 (typical)")
    assert "the gradient of 'weight' (argument 1) differs from the numerical one" in message
    assert "(those of 'x' (argument 0) agree)" in message
    # torch's own report stays reachable as the cause.
    assert "Jacobian mismatch" in str(raised.value.__cause__)


class _WrongResidualPath(torch.autograd.Function):
    """add_rms_norm whose backward doubles the gradient that comes in
    through its second output (residual_out), not the one through out."""

    @staticmethod
    def forward(ctx, x, residual, weight):
        ctx.save_for_backward(x, residual, weight)
        return torch.ops.opbridge.add_rms_norm(x, residual, weight, None, 1e-6)

    @staticmethod
    def backward(ctx, grad_out, grad_residual_out):
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_() for t in ctx.saved_tensors]
            outputs = torch.ops.opbridge.add_rms_norm(*inputs, None, 1e-6)
            return torch.autograd.grad(outputs, inputs, (grad_out, 2 * grad_residual_out))


def _add_samples(dtype=torch.float64, requires_grad=False, *, large=False, seed=0):
    from opbridge.ops import Sample

    g = torch.Generator().manual_seed(seed)
    x, residual = (torch.randn(3, 8, generator=g, dtype=dtype) for _ in range(2))
    w = torch.rand(8, generator=g, dtype=dtype) + 0.5
    yield Sample(tuple(t.requires_grad_(requires_grad) for t in (x, residual, w)), label="typical")


def test_a_wrong_backward_through_one_output_names_that_output():
    good = dataclasses.replace(card("opbridge::add_rms_norm"), samples=_add_samples)
    check_gradcheck(dataclasses.replace(good, call=torch.ops.opbridge.add_rms_norm))
    with pytest.raises(AssertionError) as raised:
        check_gradcheck(dataclasses.replace(good, call=_WrongResidualPath.apply))
    message = str(raised.value)
    assert message.startswith("opbridge::add_rms_norm: gradcheck failed on sample 0 (typical)")
    # residual_out = x + residual: the gradients of x and residual take the wrong path.
    assert "the gradient of 'x' (argument 0), 'residual' (argument 1) differs" in message
    assert "(those of 'weight' (argument 2) agree)" in message
    assert "the backward through 'residual_out' (output 1) is wrong" in message
    assert "through 'out' (output 0) it agrees" in message
