"""rms_norm: x * rsqrt(mean(x^2, -1) + eps) * weight (+ bias)."""

from __future__ import annotations

import torch

from opbridge.ops._builder import Builder


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """RMS normalization over the last dimension of ``x``.

    ``weight`` (and ``bias`` when given) are 1-D with ``x.shape[-1]`` elements
    and ``x``'s dtype (float32, float64, float16 or bfloat16).
    """
    return torch.ops.opbridge.rms_norm.default(x, weight, bias, eps)


# ONNX added RMSNormalization in opset 23.
RMS_NORMALIZATION_OPSET = 23


def standard(b: Builder, x, weight, bias=None, *, eps: float):
    """RMSNormalization from opset 23; before it, the chain
    Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul that ONNX Runtime fuses
    into its SimplifiedLayerNormalization kernel."""
    if b.opset >= RMS_NORMALIZATION_OPSET:
        # stash_type: accumulate in the input's precision for float64 (ONNX's
        # default, float32, would lose digits there).
        stash = 11 if b.float_dtype(x) == "float64" else 1
        y = b.op("RMSNormalization", x, weight, axis=-1, epsilon=float(eps), stash_type=stash)
    else:
        squared = b.op("Pow", x, b.constant(2.0, like=x))
        if b.opset >= 18:
            mean = b.op("ReduceMean", squared, b.ints([-1]), keepdims=1)
        else:
            mean = b.op("ReduceMean", squared, axes=[-1], keepdims=1)
        rms = b.op("Sqrt", b.op("Add", mean, b.constant(eps, like=x)))
        y = b.op("Mul", b.op("Div", x, rms), weight)
    if bias is not None:
        y = b.op("Add", y, bias)
    return y
