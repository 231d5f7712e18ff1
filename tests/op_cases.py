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


# ---------------------------------------------------------------- add_rms_norm


def add_rms_norm_reference(x, residual, weight, bias=None, eps=1e-6):
    total = x + residual
    return rms_norm_reference(total, weight, bias, eps), total


def add_rms_norm_samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(shape, scale=1.0):
        return _make(shape, dtype, requires_grad, g, scale)

    def w(n):
        return (1 + 0.1 * _make((n,), dtype, False, g)).detach().requires_grad_(requires_grad)

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
        yield Sample((t((2, 65536)), t((2, 65536)), w(65536)), label="very long row")
        yield Sample((t((4096, 8)), t((4096, 8)), w(8), t((8,))), label="many rows")


# ------------------------------------------------------------------- bias_gelu


def bias_gelu_reference(x, bias, approximate="none"):
    return torch.nn.functional.gelu(x + bias, approximate=approximate)


def bias_gelu_samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(shape, scale=1.0):
        return _make(shape, dtype, requires_grad, g, scale)

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


# ------------------------------------------------------------ rotary_embedding


def rotary_embedding_reference(x, cos, sin, interleaved=False):
    half = cos.shape[-1]
    rotated, rest = x[..., : 2 * half], x[..., 2 * half :]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    if interleaved:
        a, b = rotated[..., 0::2], rotated[..., 1::2]
        out = torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
    else:
        a, b = rotated[..., :half], rotated[..., half:]
        out = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
    return torch.cat([out, rest], dim=-1)


def rotary_embedding_samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(shape, scale=1.0):
        return _make(shape, dtype, requires_grad, g, scale)

    def tables(seq, half):
        angles = torch.rand((seq, half), dtype=torch.float64, generator=g) * 6.3
        return (
            angles.cos().to(dtype).requires_grad_(requires_grad),
            angles.sin().to(dtype).requires_grad_(requires_grad),
        )

    yield Sample((t((1, 1, 1, 2)), *tables(1, 1)), label="one pair")
    yield Sample((t((2, 5, 3, 8)), *tables(5, 4)), label="typical, half-split")
    yield Sample((t((2, 5, 3, 8)), *tables(5, 4), True), label="typical, interleaved")
    yield Sample((t((2, 5, 3, 8)), *tables(5, 2)), label="partial rotary, half-split")
    yield Sample((t((2, 5, 3, 8)), *tables(5, 3), True), label="partial rotary, interleaved")
    yield Sample((t((1, 1, 1, 2)), *tables(1, 1), True), label="1x1, interleaved")
    # [batch, heads, seq, head_dim] storage seen as [batch, seq, heads, head_dim].
    noncontig = t((2, 3, 5, 8)).detach().transpose(1, 2)
    yield Sample((noncontig.requires_grad_(requires_grad), *tables(5, 4)), label="non-contiguous")
    if large:
        yield Sample((t((1, 2, 2, 16384)), *tables(2, 8192)), label="very long head")
        yield Sample((t((64, 64, 2, 4)), *tables(64, 2), True), label="many rows")


# ------------------------------------------------------------- normalize_image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def normalize_image_reference(image, mean, std, channels_last_in=True):
    x = image.to(torch.float32) if image.dtype == torch.uint8 else image
    if channels_last_in:
        x = x.permute(0, 3, 1, 2)
    m = torch.tensor(mean, dtype=x.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, -1, 1, 1)
    return ((x / 255 - m) / s).contiguous()


def normalize_image_samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def image(shape):
        pixels = torch.randint(0, 256, shape, generator=g, dtype=torch.int64)
        return pixels.to(dtype).requires_grad_(requires_grad)

    mean, std = IMAGENET_MEAN, IMAGENET_STD
    yield Sample((image((1, 1, 1, 1)), [0.5], [0.25]), label="one element")
    yield Sample((image((2, 8, 6, 3)), mean, std), label="typical, NHWC")
    yield Sample((image((2, 3, 8, 6)), mean, std, False), label="typical, NCHW in")
    yield Sample((image((1, 1, 1, 3)), mean, std), label="1x1 pixel")
    yield Sample(
        (image((2, 5, 7, 4)), [0.1, 0.2, 0.3, 0.4], [0.5, 1.0, 2.0, -1.0]), label="4 channels"
    )
    # A channels_last-strided NCHW tensor seen as NHWC: non-contiguous.
    noncontig = image((2, 3, 6, 5)).detach().permute(0, 2, 3, 1)
    yield Sample((noncontig.requires_grad_(requires_grad), mean, std), label="non-contiguous")
    if dtype == torch.float32 and not requires_grad:
        pixels = torch.randint(0, 256, (2, 8, 6, 3), generator=g, dtype=torch.uint8)
        yield Sample((pixels, mean, std), label="uint8, NHWC")
        pixels = torch.randint(0, 256, (2, 3, 4, 5), generator=g, dtype=torch.uint8)
        yield Sample((pixels, mean, std, False), label="uint8, NCHW in")
    if large:
        yield Sample((image((1, 2, 30000, 3)), mean, std), label="very long row")
        yield Sample((image((4, 1024, 2, 3)), mean, std), label="many rows")


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
    "add_rms_norm": OpCase(
        "add_rms_norm",
        opbridge.add_rms_norm,
        add_rms_norm_reference,
        add_rms_norm_samples,
        onnx_type="AddRmsNorm",
    ),
    "bias_gelu": OpCase(
        "bias_gelu",
        opbridge.bias_gelu,
        bias_gelu_reference,
        bias_gelu_samples,
        onnx_type="BiasGelu",
    ),
    "rotary_embedding": OpCase(
        "rotary_embedding",
        opbridge.rotary_embedding,
        rotary_embedding_reference,
        rotary_embedding_samples,
        onnx_type="RotaryEmbedding",
    ),
    "normalize_image": OpCase(
        "normalize_image",
        opbridge.normalize_image,
        normalize_image_reference,
        normalize_image_samples,
        onnx_type="NormalizeImage",
    ),
}


def as_tuple(value) -> tuple:
    """An op's output(s) as a tuple (multi-output ops return tuples)."""
    return tuple(value) if isinstance(value, tuple | list) else (value,)


def tolerances(dtype):
    return (
        {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-10}
    )
