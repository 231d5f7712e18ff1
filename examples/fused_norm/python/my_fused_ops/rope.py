"""gated_rope's card: LLaMA's rotary position embedding with a learnable gate
per head, written with the SDK's kernel toolkit (csrc/gated_rope/kernel.cpp).

x [B, S, H, D], positions [B, S] (int64 or int32), gate [H]:
y[b, s, h] = gate[h] * the rotation of the pairs (i, i + D/2) of x[b, s, h]
by the angles positions[b, s] * base^(-2i / D).
"""

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card, Sample


def gated_rope(
    x: torch.Tensor, positions: torch.Tensor, gate: torch.Tensor, base: float = 10000.0
) -> torch.Tensor:
    """The gated rotary embedding (x float32, float64, float16 or bfloat16;
    positions int64 or int32; gate of x's dtype)."""
    return torch.ops.myops.gated_rope.default(x, positions, gate, base)


def _inverse_frequencies(dim: int, base: float) -> torch.Tensor:
    return base ** (-2.0 * torch.arange(dim // 2, dtype=torch.float64) / dim)


def reference(x, positions, gate, base=10000.0):
    """The math as the kernel does it: angles, cosines and sines in float64,
    the rotation in float32 (float64 for float64), rounded once to x's dtype."""
    half = x.shape[-1] // 2
    theta = positions.to(torch.float64)[:, :, None, None] * _inverse_frequencies(x.shape[-1], base)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = theta.cos().to(compute), theta.sin().to(compute)
    xc = x.to(compute)
    x1, x2 = xc[..., :half], xc[..., half:]
    y = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1) * gate.to(compute)[:, None]
    return y.to(x.dtype)


def composite(x, positions, gate, base=10000.0):
    """What a model writes (transformers' LLaMA rotary embedding, then the
    gate): float32 angles, cosines and sines cast to x's dtype, the rotation
    in x's dtype. The composite torch.compile fuses, and the benchmark's
    baseline."""
    dim = x.shape[-1]
    arange = torch.arange(0, dim, 2, dtype=torch.int64, device=x.device).float()
    inv_freq = 1.0 / (base ** (arange / dim))
    freqs = positions[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : dim // 2], x[..., dim // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x * cos + rotated * sin) * gate[:, None]


_ONNX_FLOAT = {"float16": 10, "bfloat16": 16}


def standard(b, x, positions, gate, *, base):
    """Angles from Cast(positions) times a constant of inverse frequencies
    (float64 for float64 x, else float32), Cos and Sin, then the rotation of
    the two halves (Slice, Mul, Sub, Add, Concat) and the gate per head."""
    shape = b.shape(x)
    if not shape or shape[-1] is None:
        raise ValueError(
            f"gated_rope's standard form needs x's head_dim known at export, got shape {shape}"
        )
    dim = shape[-1]
    half = dim // 2
    dtype = b.float_dtype(x)
    wide = dtype == "float64"
    pos = b.op("Unsqueeze", b.op("Cast", positions, to=11 if wide else 1), b.ints([-1]))
    freq = b.floats(_inverse_frequencies(dim, base).tolist(), like=x if wide else pos)
    theta = b.op("Unsqueeze", b.op("Mul", pos, freq), b.ints([2]))  # [B, S, 1, half]
    cos, sin = b.op("Cos", theta), b.op("Sin", theta)
    if dtype in _ONNX_FLOAT:
        to = _ONNX_FLOAT[dtype]
        cos, sin = b.op("Cast", cos, to=to), b.op("Cast", sin, to=to)
    last = b.ints([-1])
    x1 = b.op("Slice", x, b.ints([0]), b.ints([half]), last)
    x2 = b.op("Slice", x, b.ints([half]), b.ints([dim]), last)
    y1 = b.op("Sub", b.op("Mul", x1, cos), b.op("Mul", x2, sin))
    y2 = b.op("Add", b.op("Mul", x2, cos), b.op("Mul", x1, sin))
    y = b.op("Concat", y1, y2, axis=-1)
    return b.op("Mul", y, b.op("Unsqueeze", gate, last))


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(*shape, scale=1.0, shift=0.0):
        v = shift + scale * torch.randn(shape, dtype=torch.float64, generator=g)
        return v.to(dtype).requires_grad_(requires_grad)

    def pos(*shape, high=64, index=torch.int64):
        return torch.randint(0, high, shape, generator=g).to(index)

    yield Sample((t(2, 5, 3, 8), pos(2, 5), t(3, shift=1.0)), label="typical")
    yield Sample((t(1, 1, 1, 2), pos(1, 1), t(1, shift=1.0), 500.0), label="one pair, base 500")
    yield Sample(
        (t(2, 3, 2, 6), pos(2, 3, index=torch.int32), t(2, shift=1.0)),
        {"base": 100.0},
        label="int32 positions, a partial vector",
    )
    yield Sample(
        (t(1, 4, 2, 16), pos(1, 4, high=200000), t(2, shift=1.0)),
        label="angles past 39000 (libm path)",
    )
    x = t(2, 3, 4, 8).detach().transpose(1, 2).requires_grad_(requires_grad)  # [2, 4, 3, 8]
    yield Sample((x, pos(2, 4), t(3, shift=1.0)), label="non-contiguous")
    if large:
        yield Sample((t(2, 64, 8, 128), pos(2, 64, high=8192), t(8, shift=1.0)), label="large")


def bench_inputs(shape, dtype, requires_grad=False):
    """Size [rows, cols] as one sequence of `rows` tokens and cols / D heads of
    D = 128 (D = cols below 128): x [1, rows, cols / D, D]."""
    rows, cols = shape
    dim = min(cols, 128)
    g = torch.Generator().manual_seed(0)
    x = torch.randn((1, rows, cols // dim, dim), generator=g).to(dtype)
    gate = (1.0 + 0.1 * torch.randn(cols // dim, generator=g)).to(dtype)
    positions = torch.arange(rows, dtype=torch.int64)[None]
    return (x.requires_grad_(requires_grad), positions, gate.requires_grad_(requires_grad), 10000.0)


CARD = opbridge.ops.register_card(
    Card(
        name="gated_rope",
        namespace="myops",
        call=gated_rope,
        standard=standard,
        reference=reference,
        samples=samples,
        bench_inputs=bench_inputs,
        composite=composite,
    )
)
