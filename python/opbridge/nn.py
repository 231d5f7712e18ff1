"""Modules built on the opbridge operators."""

from __future__ import annotations

import torch
from torch import nn

from opbridge.ops import rms_norm, scaled_clamp


class ScaledClamp(nn.Module):
    """``clamp(x * scale, min_val, max_val)``; ``ScaledClamp(1.0)`` is ReLU6."""

    def __init__(self, scale: float, min_val: float = 0.0, max_val: float = 6.0):
        super().__init__()
        self.scale = float(scale)
        self.min_val = float(min_val)
        self.max_val = float(max_val)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scaled_clamp(x, self.scale, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"scale={self.scale}, min_val={self.min_val}, max_val={self.max_val}"


class RMSNorm(nn.Module):
    """RMS normalization over the last dimension.

    Matches ``torch.nn.RMSNorm(dim, eps)`` (same ``weight`` parameter, ones at
    start) when ``bias=False``; ``bias=True`` adds a ``bias`` parameter
    (zeros at start).
    """

    def __init__(
        self,
        dim: int,
        eps: float = 1e-6,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.dim = int(dim)
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(self.dim, **factory))
        if bias:
            self.bias = nn.Parameter(torch.zeros(self.dim, **factory))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}"
