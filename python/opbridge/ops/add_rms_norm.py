"""add_rms_norm: the pre-norm residual step, residual add fused with RMSNorm."""

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
from opbridge.ops.rms_norm import reference as rms_norm_reference
from opbridge.ops.rms_norm import standard as rms_norm_standard

if TYPE_CHECKING:
    from opbridge.export.builder import Builder


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
    (float32, float64, float16 or bfloat16; 16-bit computed in float32).
    ``residual_out`` is rounded to that dtype before it is normalized, exactly
    as the unfused ``rms_norm(x + residual)``.
    """
    return torch.ops.opbridge.add_rms_norm.default(x, residual, weight, bias, eps)


def standard(b: Builder, x, residual, weight, bias=None, *, eps: float):
    """Add, then rms_norm's standard form on the sum (RMSNormalization from
    opset 23, else Pow/ReduceMean/Add/Sqrt/Div/Mul); outputs (out, sum)."""
    total = b.op("Add", x, residual)
    return rms_norm_standard(b, total, weight, bias, eps=eps), total


def ort(b: Builder, x, residual, weight, bias=None, *, eps: float):
    """ONNX Runtime's SkipSimplifiedLayerNormalization (float32), whose
    fourth output is the sum; it takes 2-D or 3-D inputs, so other ranks are
    reshaped to [-1, hidden] and back. The bias is added after it (the
    operator's own bias input is added before the norm). Other dtypes take
    the standard form."""
    if b.float_dtype(weight) != "float32":
        return standard(b, x, residual, weight, bias, eps=eps)
    y, total = b.skip_normalization(
        "SkipSimplifiedLayerNormalization", x, residual, weight, epsilon=float(eps)
    )
    return (b.op("Add", y, bias) if bias is not None else y), total


def reference(x, residual, weight, bias=None, eps=1e-6):
    total = x + residual
    return rms_norm_reference(total, weight, bias, eps), total


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    tensors = SampleTensors(dtype, requires_grad, seed)
    t, w = tensors.t, tensors.weight

    yield Sample((t((1,)), t((1,)), w(1)), label="one element")
    yield Sample(
        (t((4, 16)), t((4, 16)), w(16), t((16,), 0.1)), {"eps": 1e-5}, label="typical + bias"
    )
    yield Sample((t((4, 16)), t((4, 16)), w(16)), label="typical, no bias")
    yield Sample((t((1, 1)), t((1, 1)), w(1), t((1,))), label="1x1")
    yield Sample((t((2, 3, 8), 10.0), t((2, 3, 8)), w(8), None, 1e-3), label="3-d, eps=1e-3")
    noncontig = t((24, 6)).detach().t()
    yield Sample(
        (noncontig.requires_grad_(requires_grad), t((6, 24)), w(24)), label="non-contiguous"
    )
    if large:
        yield from tensors.large_norm_samples(residual=True)


def bench_inputs(shape, dtype, requires_grad=False):
    """x and residual ``[rows, cols]``, weight ``[cols]``; no bias, default eps."""
    rows, cols = shape
    g = bench_generator()
    x = bench_randn((rows, cols), dtype, g)
    residual = bench_randn((rows, cols), dtype, g)
    return with_grad((x, residual, bench_weight(cols, dtype, g)), requires_grad)


def builtin(x, residual, weight, bias=None, eps=1e-6):
    """``F.rms_norm`` on ``x + residual``."""
    y = F.rms_norm(x + residual, (x.shape[-1],), weight, eps)
    return (y + bias if bias is not None else y), x + residual


CARD = Card.of_module(
    globals(),
    name="add_rms_norm",
    call=add_rms_norm,
    layout=Layout(
        {
            **dict.fromkeys(("x", "residual", "out", "residual_out"), "...d"),
            **dict.fromkeys(("weight", "bias"), "d"),
        },
        whole="d",
    ),
)
register_card(CARD)
