"""fused_norm's card (call, reference, standard decomposition, samples,
benchmark inputs) and an nn.Module."""

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card, Sample


def fused_norm(x, weight, bias, eps: float = 1e-5):
    """x * rsqrt(mean(x^2, -1) + eps) * weight + bias over the last dimension."""
    return torch.ops.myops.fused_norm.default(x, weight, bias, eps)


def reference(x, weight, bias, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight + bias


def standard(b, x, weight, bias, *, eps):
    """Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul -> Add (opset 18)."""
    squared = b.op("Pow", x, b.constant(2.0, like=x))
    mean = b.op("ReduceMean", squared, b.ints([-1]), keepdims=1)
    rms = b.op("Sqrt", b.op("Add", mean, b.constant(eps, like=x)))
    return b.op("Add", b.op("Mul", b.op("Div", x, rms), weight), bias)


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(*shape, scale=1.0, offset=0.0):
        v = offset + scale * torch.randn(shape, dtype=torch.float64, generator=g)
        return v.to(dtype).requires_grad_(requires_grad)

    def params(n):
        return t(n, scale=0.1, offset=1.0), t(n, scale=0.1)

    yield Sample((t(4, 16), *params(16)), label="typical")
    yield Sample((t(1, 1), *params(1), 1e-3), label="1x1")
    yield Sample((t(2, 3, 8), *params(8)), {"eps": 1e-6}, label="3-d, eps keyword")
    noncontig = t(8, 5).detach().t()
    yield Sample((noncontig.requires_grad_(requires_grad), *params(8)), label="non-contiguous")
    if large:
        yield Sample((t(2, 70000), *params(70000)), label="very long row")
        yield Sample((t(5000, 3), *params(3)), label="many rows")


def bench_inputs(shape, dtype, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    rows, cols = shape

    def t(*s, offset=0.0):
        v = offset + torch.randn(s, generator=g)
        return v.to(dtype).requires_grad_(requires_grad)

    return (t(rows, cols), t(cols, offset=1.0), t(cols))


CARD = opbridge.ops.register_card(
    Card(
        name="fused_norm",
        namespace="myops",
        call=fused_norm,
        standard=standard,
        reference=reference,
        samples=samples,
        bench_inputs=bench_inputs,
        composite=reference,
    )
)


class FusedNorm(torch.nn.Module):
    """RMS normalization with weight and bias, through torch.ops.myops.fused_norm."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.bias = torch.nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        return fused_norm(x, self.weight, self.bias, self.eps)
