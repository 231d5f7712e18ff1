"""normalize_image computes each dtype at its own precision, at every SIMD
target, in PyTorch and in ONNX Runtime, against a float64 reference.

A float64 image must be computed in float64 throughout: a per-channel scale
or shift rounded to float32 anywhere would move results by about 1e-7 of
their size, five orders above float64's rounding. In ONNX Runtime the node's
FLOATS attributes are float32 (ONNX stores them so, documented in
docs/guides/export-and-routes.md): there the reference takes mean and std as
the node holds them, and everything after that must still be float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto

import opbridge
from opbridge import _C

from ort_helpers import single_node_model

TARGETS = _C.simd_targets()
# Relative to the size of the terms of x * scale + shift: a few units in the
# last place of the output dtype.
TOL = {
    torch.float64: 1e-14,
    torch.float32: 1e-6,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.uint8]
# NHWC shapes of 1, 3 and 4 channels (de-interleaving loads) and of 5 (element
# by element), with widths leaving a partial vector at every vector width.
SHAPES = [(1, 1, 1, 3), (2, 5, 7, 3), (2, 4, 4, 4), (1, 3, 9, 1), (1, 2, 19, 5), (1, 2, 37, 3)]
MEAN = [0.485, 0.456, 0.406, 0.5, 0.1]
STD = [0.229, 0.224, 0.225, 0.3, -0.7]
ONNX_TYPES = {
    torch.float64: TensorProto.DOUBLE,
    torch.float32: TensorProto.FLOAT,
    torch.uint8: TensorProto.UINT8,
}


@pytest.fixture
def target(request):
    _C.set_simd_target(request.param)
    yield request.param
    _C.set_simd_target("")


def image(shape, dtype, channels_last, seed=0):
    """Pixel values 0..255 (floating dtypes also get fractions), NHWC or NCHW."""
    g = torch.Generator().manual_seed(seed)
    n, h, w, c = shape
    planar = (n, h, w, c) if channels_last else (n, c, h, w)
    pixels = torch.randint(0, 256, planar, generator=g, dtype=torch.int64)
    if dtype == torch.uint8:
        return pixels.to(torch.uint8)
    frac = torch.rand(planar, generator=g, dtype=torch.float64)
    return (pixels + frac).clamp(max=255.0).to(dtype)


def reference(x, mean, std, channels_last):
    """(x / 255 - mean) / std in float64, and the size of its terms."""
    x64 = x.double()
    if channels_last:
        x64 = x64.permute(0, 3, 1, 2)
    m = torch.tensor(mean, dtype=torch.float64).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(1, -1, 1, 1)
    return (x64 / 255 - m) / s, (x64 / 255).abs() / s.abs() + (m / s).abs()


def check(got, x, mean, std, channels_last, dtype, what):
    want, size = reference(x, mean, std, channels_last)
    out_dtype = torch.float32 if dtype == torch.uint8 else dtype
    error = ((got.double() - want).abs() / size).max().item()
    assert error <= TOL[out_dtype], (
        f"normalize_image {what} ({dtype}, {tuple(x.shape)}): largest error {error:.3g} "
        f"of the terms' size, tolerance {TOL[out_dtype]:g}"
    )


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_target_and_dtype_in_pytorch(target, dtype, channels_last, shape):
    c = shape[3]
    mean, std = MEAN[:c], STD[:c]
    x = image(shape, dtype, channels_last)
    y = opbridge.normalize_image(x, mean, std, channels_last)
    assert y.dtype == (torch.float32 if dtype == torch.uint8 else dtype)
    check(y, x, mean, std, channels_last, dtype, f"at {target}")


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
def test_backward_every_target(target, dtype, channels_last):
    shape = (2, 5, 7, 3)
    mean, std = MEAN[:3], STD[:3]
    x = image(shape, dtype, channels_last).requires_grad_()
    y = opbridge.normalize_image(x, mean, std, channels_last)
    grad = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (gx,) = torch.autograd.grad(y, x, grad.to(dtype))
    s = torch.tensor(std, dtype=torch.float64).view(1, -1, 1, 1)
    want = grad.to(dtype).double() / (255 * s)
    if channels_last:
        want = want.permute(0, 2, 3, 1)
    torch.testing.assert_close(gx.double(), want, rtol=TOL[dtype], atol=0)


@pytest.mark.parametrize("dtype", list(ONNX_TYPES), ids=str)
@pytest.mark.parametrize("channels_last", [True, False], ids=["NHWC", "NCHW"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_onnx_runtime(dtype, channels_last, shape):
    c = shape[3]
    mean, std = MEAN[:c], STD[:c]
    x = image(shape, dtype, channels_last)
    out_dtype = torch.float32 if dtype == torch.uint8 else dtype
    model = single_node_model(
        "NormalizeImage",
        [("image", ONNX_TYPES[dtype], list(x.shape))],
        {"mean": mean, "std": std, "channels_last_in": int(channels_last)},
        output_type=ONNX_TYPES[out_dtype],
    )
    (got,) = opbridge.runtimes.onnxruntime.InferenceSession(model).run(None, {"image": x.numpy()})
    as_stored = [float(np.float32(v)) for v in mean], [float(np.float32(v)) for v in std]
    check(torch.from_numpy(got), x, *as_stored, channels_last, dtype, "in ONNX Runtime")
    # The same image in PyTorch with the attributes the node holds: the same
    # kernel, so the same values.
    torch.testing.assert_close(
        torch.from_numpy(got),
        opbridge.normalize_image(x, *as_stored, channels_last),
        rtol=TOL[out_dtype],
        atol=0,
    )
