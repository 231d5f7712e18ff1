"""add_layer_norm: the residual step, residual add fused with LayerNorm."""

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
from opbridge.ops.layer_norm import composite as layer_norm_composite
from opbridge.ops.layer_norm import ones_of_last_dim
from opbridge.ops.layer_norm import reference as layer_norm_reference
from opbridge.ops.layer_norm import standard as layer_norm_standard

if TYPE_CHECKING:
    from opbridge.export.builder import Builder


def add_layer_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual_out = x + residual``; ``out = layer_norm(residual_out, weight, bias, eps)``.

    Returns ``(out, residual_out)``. ``residual`` has ``x``'s shape; ``weight``
    and ``bias`` (each optional) are 1-D with ``x.shape[-1]`` elements; all of
    one dtype (float32, float64, float16 or bfloat16). ``residual_out`` is
    rounded to that dtype before it is normalized, exactly as the unfused
    ``layer_norm(x + residual)``.
    """
    return torch.ops.opbridge.add_layer_norm.default(x, residual, weight, bias, eps)


def standard(b: Builder, x, residual, weight=None, bias=None, *, eps: float):
    """Add, then layer_norm's standard form on the sum (LayerNormalization
    from opset 17, else the ReduceMean/Sub/Pow chain); outputs (out, sum)."""
    total = b.op("Add", x, residual)
    return layer_norm_standard(b, total, weight, bias, eps=eps), total


def ort(b: Builder, x, residual, weight=None, bias=None, *, eps: float):
    """ONNX Runtime's SkipLayerNormalization (float32), whose fourth output
    is the sum; its beta input is our bias (added after the norm; its own
    bias input, added before the norm, stays empty), and a ones gamma stands
    for an absent weight. It takes 2-D or 3-D inputs, so other ranks are
    reshaped to [-1, hidden] and back. Other dtypes take the standard form."""
    like = weight if weight is not None else bias if bias is not None else x
    if b.float_dtype(like) != "float32":
        return standard(b, x, residual, weight, bias, eps=eps)
    gamma = weight if weight is not None else ones_of_last_dim(b, x, like)
    params = (gamma,) if bias is None else (gamma, bias)
    return b.skip_normalization("SkipLayerNormalization", x, residual, *params, epsilon=float(eps))


def reference(x, residual, weight=None, bias=None, eps=1e-5):
    total = x + residual
    return layer_norm_reference(total, weight, bias, eps), total


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    tensors = SampleTensors(dtype, requires_grad, seed)
    t, w = tensors.t, tensors.weight

    yield Sample((t((1,)), t((1,))), label="one element")
    yield Sample(
        (t((4, 16)), t((4, 16)), w(16), t((16,), 0.1)),
        {"eps": 1e-5},
        label="typical + weight and bias",
    )
    yield Sample((t((4, 16)), t((4, 16))), label="typical, no weight or bias")
    yield Sample((t((3, 5)), t((3, 5)), w(5)), label="weight only, odd row")
    yield Sample((t((1, 1)), t((1, 1)), w(1), t((1,))), label="1x1")
    yield Sample((t((2, 3, 8), 10.0), t((2, 3, 8)), w(8), None, 1e-3), label="3-d, eps=1e-3")
    noncontig = t((24, 6)).detach().t()
    yield Sample(
        (noncontig.requires_grad_(requires_grad), t((6, 24)), w(24), t((24,), 0.1)),
        label="non-contiguous",
    )
    if large:
        yield from tensors.large_norm_samples(residual=True)


def bench_inputs(shape, dtype, requires_grad=False):
    """x and residual ``[rows, cols]``, weight and bias ``[cols]``; default eps."""
    rows, cols = shape
    g = bench_generator()
    x = bench_randn((rows, cols), dtype, g)
    residual = bench_randn((rows, cols), dtype, g)
    weight = bench_weight(cols, dtype, g)
    bias = (0.1 * torch.randn(cols, generator=g)).to(dtype)
    return with_grad((x, residual, weight, bias), requires_grad)


def composite(x, residual, weight=None, bias=None, eps=1e-5):
    total = x + residual
    return layer_norm_composite(total, weight, bias, eps), total


def builtin(x, residual, weight=None, bias=None, eps=1e-5):
    """``F.layer_norm`` on ``x + residual``."""
    total = x + residual
    return F.layer_norm(total, (x.shape[-1],), weight, bias, eps), total


CARD = Card.of_module(
    globals(),
    name="add_layer_norm",
    call=add_layer_norm,
    layout=Layout(
        {
            **dict.fromkeys(("x", "residual", "out", "residual_out"), "...d"),
            **dict.fromkeys(("weight", "bias"), "d"),
        },
        whole="d",
    ),
)
register_card(CARD)
