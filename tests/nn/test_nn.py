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


def test_bias_gelu_module_matches_gelu_of_biased_linear():
    for approximate in ("none", "tanh"):
        linear = torch.nn.Linear(8, 12)
        ours = torch.nn.Sequential(
            torch.nn.Linear(8, 12, bias=False), opbridge.nn.BiasGELU(12, approximate)
        )
        with torch.no_grad():
            ours[0].weight.copy_(linear.weight)
            ours[1].bias.copy_(linear.bias)
        x = torch.randn(5, 8)
        expected = torch.nn.GELU(approximate=approximate)(linear(x))
        torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=1e-5)
    assert [n for n, _ in opbridge.nn.BiasGELU(4).named_parameters()] == ["bias"]
    with pytest.raises(ValueError, match="approximate"):
        opbridge.nn.BiasGELU(4, approximate="fast")


def test_add_rms_norm_module_matches_add_then_rmsnorm():
    ours = opbridge.nn.AddRMSNorm(16, eps=1e-5)
    theirs = torch.nn.RMSNorm(16, eps=1e-5)
    with torch.no_grad():
        theirs.weight.normal_()
        ours.weight.copy_(theirs.weight)
    x, r = torch.randn(3, 16), torch.randn(3, 16)
    out, residual = ours(x, r)
    torch.testing.assert_close(residual, x + r)
    torch.testing.assert_close(out, theirs(x + r), atol=1e-5, rtol=1e-5)


def test_rotary_module_matches_llama_rotate_half():
    rope = opbridge.nn.RotaryEmbedding(8, max_seq_len=32)
    x = torch.randn(2, 10, 3, 8)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    freqs = torch.outer(torch.arange(10, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[None, :, None, :].float(), emb.sin()[None, :, None, :].float()

    def rotate_half(t):
        return torch.cat([-t[..., 4:], t[..., :4]], dim=-1)

    torch.testing.assert_close(rope(x), x * cos + rotate_half(x) * sin, atol=1e-5, rtol=1e-5)
    assert rope.cos.shape == (32, 4) and "cos" not in rope.state_dict()
    with pytest.raises(ValueError, match="rotary_dim"):
        opbridge.nn.RotaryEmbedding(8, rotary_dim=5)


def test_normalize_image_module_matches_per_channel_formula():
    module = opbridge.nn.NormalizeImage((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    image = torch.randint(0, 256, (2, 6, 5, 3), dtype=torch.uint8)
    x = image.permute(0, 3, 1, 2).float() / 255
    mean = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    torch.testing.assert_close(module(image), (x - mean) / std, atol=1e-5, rtol=1e-5)
    assert "channels_last_in=True" in repr(module)
