"""bias_gelu: gelu(x + bias), erf or tanh form."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from opbridge.ops._card import Card, Layout, Sample, register_card
from opbridge.ops._inputs import SampleTensors, bench_generator, bench_randn, with_grad

if TYPE_CHECKING:
    from opbridge.export.builder import Builder


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``torch.nn.functional.gelu(x + bias, approximate=approximate)`` in one pass.

    ``bias`` is 1-D with ``x.shape[-1]`` elements and ``x``'s dtype (float32,
    float64, float16 or bfloat16; 16-bit computed in float32); ``approximate``
    is ``"none"`` (erf) or ``"tanh"``.
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


def ort(b: Builder, x, bias, *, approximate: str):
    """ONNX Runtime's BiasGelu (erf) or FastGelu (tanh, with the bias as its
    second input), float32; other dtypes take the standard form."""
    if b.float_dtype(x) != "float32" or approximate not in ("none", "tanh"):
        return standard(b, x, bias, approximate=approximate)
    return b.contrib("BiasGelu" if approximate == "none" else "FastGelu", x, bias)


def reference(x, bias, approximate="none"):
    return F.gelu(x + bias, approximate=approximate)


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    tensors = SampleTensors(dtype, requires_grad, seed)
    t = tensors.t

    yield Sample((t((1,)), t((1,))), label="one element")
    yield Sample((t((4, 16), 2.0), t((16,))), label="typical, erf")
    yield Sample((t((4, 16), 2.0), t((16,))), {"approximate": "tanh"}, label="typical, tanh")
    yield Sample((t((1, 1)), t((1,)), "tanh"), label="1x1, tanh")
    yield Sample((t((2, 3, 8), 4.0), t((8,))), label="3-d, wide range")
    noncontig = t((24, 6), 2.0).detach().t()
    yield Sample((noncontig.requires_grad_(requires_grad), t((24,))), label="non-contiguous")
    if large:
        yield Sample((t((2, 65536), 2.0), t((65536,))), label="very long row")
        yield Sample((t((4096, 8), 2.0), t((8,)), "tanh"), label="many rows, tanh")


def bench_inputs(shape, dtype, requires_grad=False):
    """x ``[rows, cols]`` and bias ``[cols]``; the erf form."""
    rows, cols = shape
    g = bench_generator()
    x = bench_randn((rows, cols), dtype, g)
    return with_grad((x, 0.1 * bench_randn((cols,), dtype, g)), requires_grad)


def composite(x, bias, approximate="none"):
    v = x + bias
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (v + 0.044715 * v * v * v)
        return 0.5 * v * (1.0 + torch.tanh(inner))
    return 0.5 * v * (1.0 + torch.erf(v * 0.7071067811865476))


def builtin(x, bias, approximate="none"):
    return F.gelu(x + bias, approximate=approximate)


CARD = Card.of_module(
    globals(),
    name="bias_gelu",
    call=bias_gelu,
    layout=Layout({"x": "...d", "bias": "d", "y": "...d"}),
)
register_card(CARD)
