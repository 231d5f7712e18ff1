"""scaled_clamp: clamp(x * scale, min_val, max_val)."""

from __future__ import annotations

import torch

from opbridge.ops._builder import Builder


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
