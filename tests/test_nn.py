"""opbridge.nn modules against their PyTorch counterparts."""

from __future__ import annotations

import pytest
import torch

import opbridge


@pytest.mark.parametrize("eps", [1e-6, 1e-5])
def test_rmsnorm_matches_torch_nn_rmsnorm(eps):
    ours = opbridge.nn.RMSNorm(32, eps=eps)
    theirs = torch.nn.RMSNorm(32, eps=eps)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    with torch.no_grad():
        theirs.weight.normal_()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(4, 7, 32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y, y2 = ours(x), theirs(x2)
    torch.testing.assert_close(y, y2, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(y)
    y.backward(grad)
    y2.backward(grad)
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, atol=1e-4, rtol=1e-5)


def test_rmsnorm_bias_parameter():
    norm = opbridge.nn.RMSNorm(8, bias=True)
    assert [n for n, _ in norm.named_parameters()] == ["weight", "bias"]
    assert torch.equal(norm.bias, torch.zeros(8))
    assert opbridge.nn.RMSNorm(8).bias is None
    assert "bias=True" in repr(norm)


def test_rmsnorm_trains():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), opbridge.nn.RMSNorm(8, bias=True), torch.nn.Linear(8, 1)
    )
    x, target = torch.randn(64, 8), torch.randn(64, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_scaled_clamp_module_is_relu6_with_scale_one():
    x = torch.linspace(-10, 10, 101)
    torch.testing.assert_close(opbridge.nn.ScaledClamp(1.0)(x), torch.nn.functional.relu6(x))
    module = opbridge.nn.ScaledClamp(0.5, min_val=-1.0, max_val=1.0)
    torch.testing.assert_close(module(x), torch.clamp(0.5 * x, -1.0, 1.0))
    assert "scale=0.5" in repr(module)
