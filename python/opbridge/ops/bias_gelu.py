"""bias_gelu: gelu(x + bias), erf or tanh form."""

from __future__ import annotations

import math

import torch

from opbridge.ops._builder import Builder


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``torch.nn.functional.gelu(x + bias, approximate=approximate)`` in one pass.

    ``bias`` is 1-D with ``x.shape[-1]`` elements and ``x``'s dtype (float32
    or float64); ``approximate`` is ``"none"`` (erf) or ``"tanh"``.
    """
    return torch.ops.opbridge.bias_gelu.default(x, bias, approximate)


# ONNX added Gelu (with the approximate attribute) in opset 20.
GELU_OPSET = 20


def standard(b: Builder, x, bias, *, approximate: str):
    """Add + Gelu (opset >= 20); before it, 0.5 v (1 + Erf(v / sqrt(2))), or
    with approximate="tanh" 0.5 v (1 + Tanh(sqrt(2 / pi) (v + 0.044715 v^3))).
    float64 takes the Tanh formula at every opset (ONNX Runtime computes a
    float64 Gelu in lower precision) and refuses approximate="none" (ONNX
    Runtime has no float64 Erf or Gelu kernel)."""
    v = b.op("Add", x, bias)
    if approximate not in ("none", "tanh"):
        raise ValueError(
            f"opbridge::bias_gelu: approximate must be 'none' or 'tanh', got {approximate!r}"
        )
    float64 = b.float_dtype(x) == "float64"
    if float64 and approximate == "none":
        raise ValueError(
            "opbridge::bias_gelu: float64 with approximate='none' has no standard-route form "
            "that ONNX Runtime runs (it has no float64 Erf or Gelu kernel); use route='custom', "
            "or float32"
        )
    if b.opset >= GELU_OPSET and not float64:
        return b.op("Gelu", v, approximate=approximate)
    if approximate == "tanh":
        cube = b.op("Mul", b.op("Mul", v, v), v)
        inner = b.op("Add", v, b.op("Mul", cube, b.constant(0.044715, like=x)))
        t = b.op("Tanh", b.op("Mul", inner, b.constant(math.sqrt(2.0 / math.pi), like=x)))
    else:
        t = b.op("Erf", b.op("Mul", v, b.constant(1.0 / math.sqrt(2.0), like=x)))
    half_v = b.op("Mul", v, b.constant(0.5, like=x))
    return b.op("Mul", half_v, b.op("Add", t, b.constant(1.0, like=x)))
