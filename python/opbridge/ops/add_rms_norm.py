"""add_rms_norm: the pre-norm residual step, residual add fused with RMSNorm."""

from __future__ import annotations

import torch

from opbridge.ops import rms_norm as _rms_norm
from opbridge.ops._builder import Builder


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual_out = x + residual``; ``out = rms_norm(residual_out, weight, bias, eps)``.

    Returns ``(out, residual_out)``. ``residual`` has ``x``'s shape; ``weight``
    (and ``bias``) are 1-D with ``x.shape[-1]`` elements; all of one dtype
    (float32 or float64). ``residual_out`` is rounded to that dtype before it
    is normalized, exactly as the unfused ``rms_norm(x + residual)``.
    """
    return torch.ops.opbridge.add_rms_norm.default(x, residual, weight, bias, eps)


def standard(b: Builder, x, residual, weight, bias=None, *, eps: float):
    """Add, then rms_norm's standard form on the sum (RMSNormalization from
    opset 23, else Pow/ReduceMean/Add/Sqrt/Div/Mul); outputs (out, sum)."""
    total = b.op("Add", x, residual)
    return _rms_norm.standard(b, total, weight, bias, eps=eps), total
