"""layer_norm: (x - mean) / sqrt(var + eps) (* weight) (+ bias) over the last dimension."""

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


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Layer normalization over the last dimension of ``x``, with the biased
    variance: ``torch.nn.functional.layer_norm(x, (x.shape[-1],), weight,
    bias, eps)``.

    ``weight`` and ``bias`` (each optional) are 1-D with ``x.shape[-1]``
    elements and ``x``'s dtype (float32, float64, float16 or bfloat16; the
    16-bit types compute in float32).
    """
    return torch.ops.opbridge.layer_norm.default(x, weight, bias, eps)


# ONNX added LayerNormalization in opset 17.
LAYER_NORMALIZATION_OPSET = 17

_INT64_MAX = 2**63 - 1


def ones_of_last_dim(b: Builder, x, like):
    """A 1-D tensor of ones with ``x.shape[-1]`` elements and ``like``'s
    dtype: a constant when the size is known at export time, else expanded
    from ``x``'s shape."""
    shape = b.shape(x)
    if shape and shape[-1] is not None:
        return b.floats([1.0] * shape[-1], like=like)
    cols = b.op("Slice", b.op("Shape", x), b.ints([-1]), b.ints([_INT64_MAX]))
    return b.op("Expand", b.constant(1.0, like=like), cols)


def standard(b: Builder, x, weight=None, bias=None, *, eps: float):
    """LayerNormalization from opset 17 (a ones Scale when there is no
    weight); before it, the chain ReduceMean -> Sub -> Pow -> ReduceMean ->
    Add -> Sqrt -> Div (-> Mul -> Add) that ONNX Runtime fuses into its
    LayerNormalization kernel. float64 writes Mul(d, d) for Pow in the chain:
    ONNX Runtime's fusion would replace a float64 epsilon by 1e-5."""
    # weight and bias have x's dtype and, unlike an intermediate x, a known one.
    like = weight if weight is not None else bias if bias is not None else x
    if b.opset >= LAYER_NORMALIZATION_OPSET:
        scale = weight if weight is not None else ones_of_last_dim(b, x, like)
        inputs = (x, scale) if bias is None else (x, scale, bias)
        y = b.op("LayerNormalization", *inputs, axis=-1, epsilon=float(eps), stash_type=1)
        # onnxscript gives every output of the schema (Y, Mean, InvStdDev).
        return y[0] if isinstance(y, tuple | list) else y

    def reduce_mean(value):
        if b.opset >= 18:
            return b.op("ReduceMean", value, b.ints([-1]), keepdims=1)
        return b.op("ReduceMean", value, axes=[-1], keepdims=1)

    centered = b.op("Sub", x, reduce_mean(x))
    if b.float_dtype(like) == "float64":
        squared = b.op("Mul", centered, centered)
    else:
        squared = b.op("Pow", centered, b.constant(2.0, like=like))
    std = b.op("Sqrt", b.op("Add", reduce_mean(squared), b.constant(eps, like=like)))
    y = b.op("Div", centered, std)
    if weight is not None:
        y = b.op("Mul", y, weight)
    if bias is not None:
        y = b.op("Add", y, bias)
    return y


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32


def reference(x, weight=None, bias=None, eps=1e-5):
    """The formula in float32 (float64 for float64), rounded to ``x``'s dtype."""
    c = _compute_dtype(x)
    xc = x.to(c)
    mean = xc.mean(-1, keepdim=True)
    var = (xc - mean).pow(2).mean(-1, keepdim=True)
    y = (xc - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.to(c)
    if bias is not None:
        y = y + bias.to(c)
    return y.to(x.dtype)


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    tensors = SampleTensors(dtype, requires_grad, seed)
    t, w = tensors.t, tensors.weight

    yield Sample((t((1,)),), label="one element")
    yield Sample(
        (t((4, 16)), w(16), t((16,), 0.1)), {"eps": 1e-5}, label="typical + weight and bias"
    )
    yield Sample((t((4, 16)),), label="typical, no weight or bias")
    yield Sample((t((3, 5)), w(5)), label="weight only, odd row")
    yield Sample((t((1, 1)), w(1), t((1,))), label="1x1")
    yield Sample((t((2, 3, 8), 10.0), w(8), None, 1e-3), label="3-d, large values, eps=1e-3")
    noncontig = t((24, 6)).detach().t()
    yield Sample(
        (noncontig.requires_grad_(requires_grad), w(24), t((24,), 0.1)), label="non-contiguous"
    )
    if large:
        yield from tensors.large_norm_samples()


def bench_inputs(shape, dtype, requires_grad=False):
    """x ``[rows, cols]``, weight and bias ``[cols]`` (as torch.nn.LayerNorm); default eps."""
    rows, cols = shape
    g = bench_generator()
    x = bench_randn((rows, cols), dtype, g)
    weight = bench_weight(cols, dtype, g)
    bias = (0.1 * torch.randn(cols, generator=g)).to(dtype)
    return with_grad((x, weight, bias), requires_grad)


def composite(x, weight=None, bias=None, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    y = centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight
    return y + bias if bias is not None else y


def builtin(x, weight=None, bias=None, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


CARD = Card.of_module(
    globals(),
    # LayerNormalization is ONNX Runtime's own fused kernel: the standard
    # form is the ort route's too (no ort form).
    name="layer_norm",
    call=layer_norm,
    layout=Layout({"x": "...d", "weight": "d", "bias": "d", "y": "...d"}, whole="d"),
)
register_card(CARD)
