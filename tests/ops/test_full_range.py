"""Every built-in operator across the whole finite range of its inputs, at
every SIMD target, in float32 and float64, against a float64 reference.

Each op's sample inputs (its card's) are rescaled so that their largest
element is a given magnitude, from the dtype's largest finite value (or
1e30 for the norms, whose squares would overflow long before) down through
tiny values to subnormals, and mixed with signed zeros. The references are
written here in float64, in forms without cancellation, independently of the
cards' references. An op without one here fails the test, so a new op is
covered as soon as it is added."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import opbridge
from opbridge import _C

from op_cases import OPS, Sample, as_tuple

TARGETS = _C.simd_targets()
DTYPES = [torch.float32, torch.float64]
# Relative to the size of the terms of each output element (see Range.size):
# a few hundred units in the last place, far below a float32-sized error in
# float64 (1e-7) or a lost term.
RTOL = {torch.float32: 2e-5, torch.float64: 1e-12}


def magnitudes(dtype, cap: float | None) -> list[float]:
    """Largest |element| of each rescaled input: the dtype's largest finite
    value (or ``cap``), large, moderate, tiny and subnormal."""
    info = torch.finfo(dtype)
    if dtype == torch.float32:
        values = [1e38, 1e30, 1e20, 1e10, 1e3, 1.0, 1e-3, 1e-10, 1e-20, 1e-30, 1e-38, 1e-40, 1e-44]
    else:
        values = [1e300, 1e150, 1e30, 1e10, 1.0, 1e-10, 1e-30, 1e-150, 1e-300, 1e-310, 1e-320]
    if cap is None:
        return [info.max, *values]
    return [v for v in values if v <= cap]


# ---------------------------------------------------------------- references
# Each takes the call's arguments with every tensor in float64 and returns
# (output, size) pairs: size bounds the magnitude of the terms an output
# element is made of, so |got - want| <= rtol * size whatever cancels.


def _rows(t):
    return t.abs().amax(-1, keepdim=True).expand_as(t)


def scaled_clamp_ref(x, scale, min_val=0.0, max_val=6.0):
    y = torch.clamp(x * scale, min_val, max_val)
    return [(y, y.abs())]


def _rms(x, weight, bias, eps):
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight
    size = _rows(y)
    if bias is not None:
        y = y + bias
        size = size + bias.abs()
    return y, size


def rms_norm_ref(x, weight, bias=None, eps=1e-6):
    return [_rms(x, weight, bias, eps)]


def add_rms_norm_ref(x, residual, weight, bias=None, eps=1e-6):
    total = x + residual
    return [_rms(total, weight, bias, eps), (total, x.abs() + residual.abs())]


def _layer(x, weight, bias, eps):
    # Two passes (mean, then squared deviations): no cancellation.
    d = x - x.mean(-1, keepdim=True)
    y = d / torch.sqrt((d * d).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight
    size = _rows(y)
    if bias is not None:
        y = y + bias
        size = size + bias.abs()
    return y, size


def layer_norm_ref(x, weight=None, bias=None, eps=1e-5):
    return [_layer(x, weight, bias, eps)]


def add_layer_norm_ref(x, residual, weight=None, bias=None, eps=1e-5):
    total = x + residual
    return [_layer(total, weight, bias, eps), (total, x.abs() + residual.abs())]


def bias_gelu_ref(x, bias, approximate="none"):
    v = x + bias
    if approximate == "tanh":
        # 0.5 v (1 + tanh(u)) = v sigmoid(2u), with exp(-2u) overflowing to
        # inf in the far negative tail (v / inf = -0).
        u = math.sqrt(2.0 / math.pi) * (v + 0.044715 * v * v * v)
        y = v / (1.0 + torch.exp(-2.0 * u))
    else:
        y = v * 0.5 * torch.special.erfc(-v / math.sqrt(2.0))
    # The float32 erf and tanh are held to an absolute error of a few 1e-7
    # in Phi (not a relative one in the tail), times |v| up to 1.
    return [(y, y.abs() + 0.05 * v.abs().clamp(max=1.0))]


def _per_head(table):
    return table.unsqueeze(-2) if table.dim() == 3 else table[None, :, None, :]


def rotary_embedding_ref(x, cos, sin, interleaved=False):
    half = cos.shape[-1]
    c, s = _per_head(cos), _per_head(sin)

    def rotate(x, c, s, terms):
        rotated, rest = x[..., : 2 * half], x[..., 2 * half :]
        if interleaved:
            a, b = rotated[..., 0::2], rotated[..., 1::2]
        else:
            a, b = rotated[..., :half], rotated[..., half:]
        first, second = terms(a, b, c, s)
        if interleaved:
            out = torch.stack([first, second], -1).flatten(-2)
        else:
            out = torch.cat([first, second], -1)
        return torch.cat([out, rest], -1)

    y = rotate(x, c, s, lambda a, b, c, s: (a * c - b * s, b * c + a * s))
    # |a c| + |b s| and |b c| + |a s|: the size of what a rounding error can cancel.
    size = rotate(
        x.abs(),
        c.abs(),
        s.abs(),
        lambda a, b, c, s: (a * c + b * s, b * c + a * s),
    )
    return [(y, size)]


def normalize_image_ref(image, mean, std, channels_last_in=True):
    x = image.permute(0, 3, 1, 2) if channels_last_in else image
    m = torch.tensor(mean, dtype=torch.float64).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(1, -1, 1, 1)
    return [((x / 255 - m) / s, (x / 255).abs() / s.abs() + (m / s).abs())]


@dataclass
class Range:
    """How one op is swept: which positional arguments are rescaled (the
    others keep their sample values), up to which magnitude (None: the
    dtype's largest finite value), and its float64 reference."""

    reference: Callable
    rescaled: tuple[int, ...] = (0,)
    cap: float | None = None


RANGES = {
    "scaled_clamp": Range(scaled_clamp_ref),
    "rms_norm": Range(rms_norm_ref, cap=1e30),
    "add_rms_norm": Range(add_rms_norm_ref, (0, 1), cap=1e30),
    "layer_norm": Range(layer_norm_ref, cap=1e30),
    "add_layer_norm": Range(add_layer_norm_ref, (0, 1), cap=1e30),
    "bias_gelu": Range(bias_gelu_ref),
    # |a c - b s| reaches sqrt(2) |x|: past max / sqrt(2) some outputs
    # overflow to inf, as the reference rounded to the dtype does.
    "rotary_embedding": Range(rotary_embedding_ref),
    "normalize_image": Range(normalize_image_ref),
}


def test_every_op_has_a_range():
    assert set(RANGES) == set(OPS), (
        f"ops without a float64 reference in {__file__}: {sorted(set(OPS) - set(RANGES))}"
    )


# ---------------------------------------------------------------- inputs

PATTERNS = ["values", "with signed zeros"]


def rescale(t: torch.Tensor, magnitude: float, pattern: str, dtype) -> torch.Tensor:
    """t (in float64) scaled to largest |element| = magnitude, as dtype; with
    signed zeros, every third element is +0 or -0."""
    t = t.detach().double()
    peak = t.abs().max().item()
    t = t / peak if peak > 0 else t
    # Multiplied in float64 where the product is finite, then rounded (to
    # subnormals, or to 0, as dtype holds them).
    out = (t * magnitude).to(dtype)
    if pattern == "with signed zeros":
        flat = out.flatten().clone()
        flat[0::3] = 0.0
        flat[1::6] = -0.0
        out = flat.reshape(out.shape)
    return out


def cases(name: str, dtype):
    rng = RANGES[name]
    samples = list(OPS[name].samples(dtype, large=False))
    for sample in samples:
        if not isinstance(sample.args[0], torch.Tensor) or not sample.args[0].is_floating_point():
            continue  # uint8 images: their full range is covered below
        for magnitude in magnitudes(dtype, rng.cap):
            for pattern in PATTERNS:
                args = list(sample.args)
                for i in rng.rescaled:
                    args[i] = rescale(args[i], magnitude, pattern, dtype)
                yield Sample(
                    tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args),
                    sample.kwargs,
                    label=f"{sample.label}, |x| <= {magnitude:.3g}, {pattern}",
                )


def as64(value):
    return value.double() if isinstance(value, torch.Tensor) else value


def compare(name, sample, got, dtype, where):
    args = [as64(a) for a in sample.args]
    kwargs = {k: as64(v) for k, v in sample.kwargs.items()}
    expected = RANGES[name].reference(*args, **kwargs)
    got = as_tuple(got)
    assert len(got) == len(expected)
    for k, (g, (want, size)) in enumerate(zip(got, expected, strict=True)):
        assert g.dtype == dtype
        g64 = g.double()
        rounded = want.to(dtype).double()  # inf where the true value overflows dtype
        nonfinite = ~torch.isfinite(rounded)
        bad = torch.zeros_like(nonfinite)
        if nonfinite.any():
            bad |= nonfinite & ~((g64 == rounded) | (g64.isnan() & rounded.isnan()))
        finite = ~nonfinite
        # A few units of the smallest subnormal, for outputs that round there.
        floor = 4 * torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps
        err = (g64 - want).abs()
        bad |= finite & ~(err <= RTOL[dtype] * size + floor)
        if bad.any():
            i = bad.flatten().nonzero()[0].item()
            e = err.flatten()[i].item()
            s = size.flatten()[i].item()
            raise AssertionError(
                f"{name} output {k} {where}, {sample.label} ({dtype}): {int(bad.sum())} of "
                f"{bad.numel()} elements off; first at flat index {i}: got "
                f"{g64.flatten()[i].item()!r}, float64 {want.flatten()[i].item()!r} "
                f"(error {e:.3g}, {e / s if s else math.inf:.3g} of the terms' size {s:.3g})"
            )


@pytest.fixture
def target(request):
    _C.set_simd_target(request.param)
    yield request.param
    _C.set_simd_target("")


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(RANGES))
def test_full_range_matches_float64(name, dtype, target):
    call = OPS[name].call
    for sample in cases(name, dtype):
        with torch.no_grad():
            got = call(*sample.args, **sample.kwargs)
        compare(name, sample, got, dtype, f"at {target}")


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
def test_normalize_image_every_uint8_value(target, channels_last):
    pixels = torch.arange(256, dtype=torch.uint8)
    image = pixels.view(1, 1, 64, 4) if channels_last else pixels.view(1, 4, 1, 64)
    mean, std = [0.485, 0.456, 0.406, 0.5], [0.229, 0.224, 0.225, -0.7]
    got = opbridge.normalize_image(image, mean, std, channels_last)
    compare("normalize_image", Sample((image, mean, std, channels_last)), got, torch.float32, "")
