"""One pure reference and one sample-inputs generator per operator, shared
by every test that exercises an operator."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

import opbridge


@dataclass
class Sample:
    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def __repr__(self) -> str:
        return self.label


@dataclass
class OpCase:
    name: str
    call: Callable  # the opbridge op
    reference: Callable  # the same math in plain PyTorch
    samples: Callable[..., Iterator[Sample]]
    # The index of the tensor argument that carries the batch dimension.
    onnx_type: str = ""


def _make(shape, dtype, requires_grad, generator, scale=1.0):
    t = scale * torch.randn(shape, dtype=torch.float64, generator=generator)
    return t.to(dtype).requires_grad_(requires_grad)


# ---------------------------------------------------------------- scaled_clamp


def scaled_clamp_reference(x, scale, min_val=0.0, max_val=6.0):
    return torch.clamp(x * scale, min_val, max_val)


def scaled_clamp_samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def x(shape):
        return _make(shape, dtype, requires_grad, g, scale=4.0)

    yield Sample((x(()), 1.5), label="0-d")
    yield Sample((x((1,)), 2.0), label="one element")
    yield Sample((x((4, 16)), 2.0, 0.0, 6.0), label="typical")
    yield Sample((x((1, 1)), 0.5, -1.0, 1.0), label="1x1")
    yield Sample((x((3, 5, 7)), -1.25, -2.0, 3.0), label="negative scale, 3-d")
    yield Sample((x((4, 8)), 1.0), {"min_val": -0.5, "max_val": 0.5}, label="keyword bounds")
    noncontig = x((16, 9)).detach().t()
    yield Sample((noncontig.requires_grad_(requires_grad), 1.5), label="non-contiguous")
    if large:
        yield Sample((x((2, 70000)), 3.0), label="very long row")
        yield Sample((x((5000, 3)), 0.75), label="many rows")


# -------------------------------------------------------------------- rms_norm


def rms_norm_reference(x, weight, bias=None, eps=1e-6):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return y + bias if bias is not None else y


def rms_norm_samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(shape, scale=1.0):
        return _make(shape, dtype, requires_grad, g, scale)

    def w(n):
        return (1 + 0.1 * _make((n,), dtype, False, g)).detach().requires_grad_(requires_grad)

    yield Sample((t((1,)), w(1)), label="one element")
    yield Sample((t((4, 16)), w(16), t((16,), 0.1)), {"eps": 1e-5}, label="typical + bias")
    yield Sample((t((4, 16)), w(16)), label="typical, no bias")
    yield Sample((t((1, 1)), w(1), t((1,))), label="1x1")
    yield Sample((t((2, 3, 8), 10.0), w(8), None, 1e-3), label="3-d, large values, eps=1e-3")
    noncontig = t((24, 6)).detach().t()
    yield Sample((noncontig.requires_grad_(requires_grad), w(24)), label="non-contiguous")
    if large:
        yield Sample((t((2, 65536)), w(65536)), label="very long row")
        yield Sample((t((4096, 8)), w(8), t((8,))), label="many rows")


OPS = {
    "scaled_clamp": OpCase(
        "scaled_clamp",
        opbridge.scaled_clamp,
        scaled_clamp_reference,
        scaled_clamp_samples,
        onnx_type="ScaledClamp",
    ),
    "rms_norm": OpCase(
        "rms_norm", opbridge.rms_norm, rms_norm_reference, rms_norm_samples, onnx_type="RmsNorm"
    ),
}


def tolerances(dtype):
    return (
        {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-10}
    )
