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
    into its SimplifiedLayerNormalization kernel. float64 takes the chain at
    every opset, with Mul(x, x) for Pow: RMSNormalization's epsilon is a
    float32 attribute, and ONNX Runtime's fusion replaces a float64 epsilon by
    1e-5."""
    # weight has x's dtype and, unlike an intermediate x, a known one.
    fusable = b.float_dtype(weight) in ("float32", "float16", "bfloat16")
    if fusable and b.opset >= RMS_NORMALIZATION_OPSET:
        y = b.op("RMSNormalization", x, weight, axis=-1, epsilon=float(eps), stash_type=1)
    else:
        # ONNX Runtime's fusion starts at Pow; it does not match Mul(x, x).
        squared = b.op("Pow", x, b.constant(2.0, like=weight)) if fusable else b.op("Mul", x, x)
        if b.opset >= 18:
            mean = b.op("ReduceMean", squared, b.ints([-1]), keepdims=1)
        else:
            mean = b.op("ReduceMean", squared, axes=[-1], keepdims=1)
        rms = b.op("Sqrt", b.op("Add", mean, b.constant(eps, like=weight)))
        y = b.op("Mul", b.op("Div", x, rms), weight)
    if bias is not None:
        y = b.op("Add", y, bias)
    return y
