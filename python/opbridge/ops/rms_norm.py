"""rms_norm: x * rsqrt(mean(x^2, -1) + eps) * weight (+ bias)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from opbridge.ops._card import Card, Layout, Sample, register_card
from opbridge.ops._inputs import (
    SampleTensors,
    bench_generator,
    bench_randn,
    bench_weight,
    with_grad,
)

if TYPE_CHECKING:
    from opbridge.export.builder import Builder


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


def ort(b: Builder, x, weight, bias=None, *, eps: float):
    """ONNX Runtime's SimplifiedLayerNormalization (float32; ONNX Runtime
    registers it in the ai.onnx domain), then Add for the bias; other dtypes
    take the standard form."""
    if b.float_dtype(weight) != "float32":
        return standard(b, x, weight, bias, eps=eps)
    y = b.contrib(
        "SimplifiedLayerNormalization", x, weight, axis=-1, epsilon=float(eps), stash_type=1
    )
    return b.op("Add", y, bias) if bias is not None else y


def reference(x, weight, bias=None, eps=1e-6):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return y + bias if bias is not None else y


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    tensors = SampleTensors(dtype, requires_grad, seed)
    t, w = tensors.t, tensors.weight

    yield Sample((t((1,)), w(1)), label="one element")
    yield Sample((t((4, 16)), w(16), t((16,), 0.1)), {"eps": 1e-5}, label="typical + bias")
    yield Sample((t((4, 16)), w(16)), label="typical, no bias")
    yield Sample((t((1, 1)), w(1), t((1,))), label="1x1")
    yield Sample((t((2, 3, 8), 10.0), w(8), None, 1e-3), label="3-d, large values, eps=1e-3")
    noncontig = t((24, 6)).detach().t()
    yield Sample((noncontig.requires_grad_(requires_grad), w(24)), label="non-contiguous")
    if large:
        yield from tensors.large_norm_samples()


def bench_inputs(shape, dtype, requires_grad=False):
    """x ``[rows, cols]`` and weight ``[cols]``; no bias, default eps."""
    rows, cols = shape
    g = bench_generator()
    return with_grad(
        (bench_randn((rows, cols), dtype, g), bench_weight(cols, dtype, g)), requires_grad
    )


def builtin(x, weight, bias=None, eps=1e-6):
    y = F.rms_norm(x, (x.shape[-1],), weight, eps)
    return y + bias if bias is not None else y


CARD = Card.of_module(
    globals(),
    name="rms_norm",
    call=rms_norm,
    layout=Layout({"x": "...d", "weight": "d", "bias": "d", "y": "...d"}, whole="d"),
)
register_card(CARD)
