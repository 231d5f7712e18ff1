"""softmax_lse's card: softmax(x / temperature) over the last dimension and
its logsumexp, two outputs with a backward through both, written on the SDK's
row skeleton (csrc/softmax_lse/kernel.cpp)."""

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card, Layout, Sample


def softmax_lse(x: torch.Tensor, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax(x / temperature, -1), logsumexp(x / temperature, -1)); x of
    float32, float64, float16 or bfloat16 with at least one dimension, -inf
    for masked entries; temperature positive and finite."""
    return torch.ops.myops.softmax_lse.default(x, temperature)


def reference(x, temperature=1.0):
    """The same math in plain PyTorch (the composite torch.compile fuses)."""
    z = x / temperature
    return torch.softmax(z, -1), torch.logsumexp(z, -1)


def standard(b, x, *, temperature):
    """Div -> Softmax and ReduceLogSumExp over the last axis: two outputs."""
    z = b.op("Div", x, b.constant(temperature, like=x))
    y = b.op("Softmax", z, axis=-1)
    if b.opset >= 18:
        lse = b.op("ReduceLogSumExp", z, b.ints([-1]), keepdims=0)
    else:
        lse = b.op("ReduceLogSumExp", z, axes=[-1], keepdims=0)
    return y, lse


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(*shape, scale=3.0):
        return (scale * torch.randn(shape, dtype=torch.float64, generator=g)).to(dtype)

    def grad(v):
        return v.requires_grad_(requires_grad)

    yield Sample((grad(t(4, 16)),), label="typical")
    yield Sample((grad(t(1)),), label="one element")
    yield Sample((grad(t(2, 3, 37)), 0.5), label="3-d, partial vector, temperature")
    yield Sample((grad(t(3, 9, scale=40.0)),), {"temperature": 2.0}, label="large logits, keyword")
    masked = t(3, 20)
    masked[:, ::3] = float("-inf")
    yield Sample((grad(masked),), label="masked (-inf) logits")
    noncontig = t(12, 5).t()
    yield Sample((grad(noncontig),), label="non-contiguous")
    if large:
        yield Sample((grad(t(2, 70000)),), label="very long row")


def bench_inputs(shape, dtype, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    return ((3.0 * torch.randn(shape, generator=g)).to(dtype).requires_grad_(requires_grad), 1.0)


CARD = opbridge.ops.register_card(
    Card(
        name="softmax_lse",
        namespace="myops",
        call=softmax_lse,
        standard=standard,
        reference=reference,
        samples=samples,
        bench_inputs=bench_inputs,
        composite=reference,
        # The last dimension is reduced: any other may be sharded.
        layout=Layout({"x": "...d", "y": "...d", "lse": "..."}, whole="d"),
    )
)
