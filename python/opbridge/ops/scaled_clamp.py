"""scaled_clamp: clamp(x * scale, min_val, max_val)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from opbridge.ops._card import Card, Layout, Sample, register_card
from opbridge.ops._inputs import bench_generator, bench_randn, make, with_grad

if TYPE_CHECKING:
    from opbridge.export.builder import Builder


def scaled_clamp(
    x: torch.Tensor, scale: float, min_val: float = 0.0, max_val: float = 6.0
) -> torch.Tensor:
    """``clamp(x * scale, min_val, max_val)`` in one pass (ReLU6 with a scale).

    float32, float64, float16 or bfloat16 input of any shape; NaN propagates as in ``torch.clamp``.
    """
    return torch.ops.opbridge.scaled_clamp.default(x, scale, min_val, max_val)


def standard(b: Builder, x, *, scale: float, min_val: float, max_val: float):
    """Mul + Clip (Clip takes min/max as inputs from opset 11)."""
    scaled = b.op("Mul", x, b.constant(scale, like=x))
    return b.op("Clip", scaled, b.constant(min_val, like=x), b.constant(max_val, like=x))


def reference(x, scale, min_val=0.0, max_val=6.0):
    return torch.clamp(x * scale, min_val, max_val)


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def x(shape):
        return make(shape, dtype, requires_grad, g, scale=4.0)

    yield Sample((x(()), 1.5), label="0-d")
    yield Sample((x((1,)), 2.0), label="one element")
    yield Sample((x((4, 16)), 2.0, 0.0, 6.0), label="typical")
    yield Sample((x((1, 1)), 0.5, -1.0, 1.0), label="1x1")
    yield Sample((x((3, 5, 7)), -1.25, -2.0, 3.0), label="negative scale, 3-d")
    yield Sample((x((4, 8)), 1.0), {"min_val": -0.5, "max_val": 0.5}, label="keyword bounds")
    noncontig = x((16, 9)).detach().t()
    yield Sample((noncontig.requires_grad_(requires_grad), 1.5), label="non-contiguous")
    if large:
        yield Sample((x((2, 70000)), 3.0), label="very long row")
        yield Sample((x((5000, 3)), 0.75), label="many rows")


BENCH_SCALE, BENCH_MIN_VAL, BENCH_MAX_VAL = 0.5, 0.0, 6.0


def bench_inputs(shape, dtype, requires_grad=False):
    """x ``[rows, cols]``, scale 0.5, bounds 0 and 6."""
    x = bench_randn(tuple(shape), dtype, bench_generator())
    return with_grad((x, BENCH_SCALE, BENCH_MIN_VAL, BENCH_MAX_VAL), requires_grad)


def builtin(x, scale, min_val=0.0, max_val=6.0):
    """``torch.clamp`` in place on ``x * scale``."""
    return torch.mul(x, scale).clamp_(min_val, max_val)


CARD = Card.of_module(
    globals(),
    name="scaled_clamp",
    call=scaled_clamp,
    layout=Layout({"x": "...", "y": "..."}),
)
register_card(CARD)
