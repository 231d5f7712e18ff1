"""swiglu_clamp's card: silu(clamp(gate, max=limit)) * clamp(up, -limit, limit),
written with the SDK's kernel toolkit (csrc/swiglu_clamp/kernel.cpp)."""

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card, Layout, Sample


def swiglu_clamp(gate: torch.Tensor, up: torch.Tensor, limit: float = 7.0) -> torch.Tensor:
    """silu(clamp(gate, max=limit)) * clamp(up, -limit, limit), elementwise
    (float32, float64, float16 or bfloat16; gate and up of one shape)."""
    return torch.ops.myops.swiglu_clamp.default(gate, up, limit)


def reference(gate, up, limit=7.0):
    """The same math in plain PyTorch (the composite torch.compile fuses)."""
    return torch.nn.functional.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)


def standard(b, gate, up, *, limit):
    """Min -> Sigmoid -> Mul, and Min -> Max for up, then Mul."""
    hi = b.constant(limit, like=gate)
    lo = b.constant(-limit, like=gate)
    g = b.op("Min", gate, hi)
    silu = b.op("Mul", g, b.op("Sigmoid", g))
    return b.op("Mul", silu, b.op("Max", b.op("Min", up, hi), lo))


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(*shape, scale=4.0):
        v = scale * torch.randn(shape, dtype=torch.float64, generator=g)
        return v.to(dtype).requires_grad_(requires_grad)

    yield Sample((t(4, 16), t(4, 16)), label="typical")
    yield Sample((t(1), t(1), 2.0), label="one element")
    yield Sample((t(2, 3, 5), t(2, 3, 5)), {"limit": 3.0}, label="3-d, limit keyword")
    yield Sample((t(3, 7, scale=20.0), t(3, 7, scale=20.0), 1.5), label="mostly clamped")
    noncontig = t(9, 6).detach().t()
    yield Sample((noncontig.requires_grad_(requires_grad), t(6, 9)), label="non-contiguous")
    if large:
        yield Sample((t(2, 70000), t(2, 70000)), label="very long row")


def bench_inputs(shape, dtype, requires_grad=False):
    g = torch.Generator().manual_seed(0)

    def t():
        return (4.0 * torch.randn(shape, generator=g)).to(dtype).requires_grad_(requires_grad)

    return (t(), t(), 7.0)


CARD = opbridge.ops.register_card(
    Card(
        name="swiglu_clamp",
        namespace="myops",
        call=swiglu_clamp,
        standard=standard,
        reference=reference,
        samples=samples,
        bench_inputs=bench_inputs,
        composite=reference,
        # Elementwise: any dimension may be sharded (DTensor, torch.distributed).
        layout=Layout({"gate": "...", "up": "...", "y": "..."}),
    )
)
