"""Every SIMD target and every dtype of the vectorized kernels, in PyTorch
and in ONNX Runtime, against a float64 reference."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto

import opbridge
from opbridge import _C

from ort_helpers import single_node_model

TARGETS = _C.simd_targets()
HALF = [torch.float16, torch.bfloat16]
# atol = rtol: a few units in the last place of the dtype's rounding of O(1) values.
TOL = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}
# Row lengths that leave a partial vector at every vector width, and one
# longer than the float32 accumulation block.
SHAPES = [(1, 1), (3, 7), (5, 37), (2, 4099)]


@pytest.fixture
def target(request):
    _C.set_simd_target(request.param)
    yield request.param
    _C.set_simd_target("")


def rms_norm_ref(x, w, b=None, eps=1e-6):
    x64, w64 = x.double(), w.double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64
    return y + b.double() if b is not None else y


def clamp_ref(x, scale=0.5, lo=0.0, hi=6.0):
    return torch.clamp(x.double() * scale, lo, hi)


def close(got, want, dtype, scale=1.0):
    tol = TOL[dtype] * scale
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def test_targets_listed_and_selected():
    assert TARGETS, "at least one SIMD target"
    default = _C.simd_default_target()
    assert default in TARGETS
    assert _C.simd_target() == default
    with pytest.raises(ValueError, match="NO_SUCH_ISA"):
        _C.set_simd_target("NO_SUCH_ISA")
    assert _C.simd_target() == default
    _C.set_simd_target(TARGETS[-1])
    assert _C.simd_target() == TARGETS[-1]
    _C.set_simd_target("")
    assert _C.simd_target() == default


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *HALF], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm_forward_backward_every_target(target, dtype, shape):
    assert _C.simd_target() == target
    g = torch.Generator().manual_seed(1)
    x = (2 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype).requires_grad_()
    w = (1 + 0.1 * torch.randn(shape[-1], generator=g, dtype=torch.float64)).to(dtype)
    w.requires_grad_()
    b = (0.1 * torch.randn(shape[-1], generator=g, dtype=torch.float64)).to(dtype)
    b.requires_grad_()
    y = opbridge.rms_norm(x, w, b)
    assert y.dtype == dtype
    close(y, rms_norm_ref(x.detach(), w.detach(), b.detach()), dtype)

    grad = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), grad)
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    b64 = b.detach().double().requires_grad_()
    rx, rw, rb = torch.autograd.grad(rms_norm_ref(x64, w64, b64), (x64, w64, b64), grad.double())
    # Parameter gradients sum over rows: their rounding scales with the row count.
    rows = x.numel() // shape[-1]
    close(gx, rx, dtype, scale=4.0)
    close(gw, rw, dtype, scale=4.0 * rows)
    close(gb, rb, dtype, scale=4.0 * rows)


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *HALF], ids=str)
def test_scaled_clamp_every_target(target, dtype):
    g = torch.Generator().manual_seed(2)
    x = (8 * torch.randn(3, 1001, generator=g, dtype=torch.float64)).to(dtype).requires_grad_()
    y = opbridge.scaled_clamp(x, 0.5, 0.0, 6.0)
    assert y.dtype == dtype
    close(y, clamp_ref(x.detach()), dtype)
    (gx,) = torch.autograd.grad(y, (x,), torch.ones_like(y))
    inside = (x.detach().double() * 0.5 >= 0) & (x.detach().double() * 0.5 <= 6)
    torch.testing.assert_close(gx.double(), inside.double() * 0.5, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_results_do_not_depend_on_thread_count(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(517, 300, generator=g).to(dtype).requires_grad_()
    w = torch.randn(300, generator=g).to(dtype).requires_grad_()
    grad = torch.randn(517, 300, generator=g).to(dtype)
    threads = torch.get_num_threads()
    outs = []
    try:
        for n in (1, max(2, threads)):
            torch.set_num_threads(n)
            y = opbridge.rms_norm(x, w)
            outs.append((y, *torch.autograd.grad(y, (x, w), grad)))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- ONNX Runtime

ONNX_TYPES = {torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16}


def ort_value(t: torch.Tensor):
    """An OrtValue sharing t's storage (bfloat16 goes in as its bits)."""
    if t.dtype == torch.bfloat16:
        bits = t.contiguous().view(torch.int16).numpy().view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(t.contiguous().numpy())


def run_ort(model, inputs: list[torch.Tensor], out_shape, dtype) -> torch.Tensor:
    session = opbridge.runtimes.onnxruntime.InferenceSession(model)
    out = torch.empty(out_shape, dtype=dtype)
    binding = session.io_binding()
    for meta, t in zip(session.get_inputs(), inputs, strict=True):
        binding.bind_ortvalue_input(meta.name, ort_value(t))
    binding.bind_ortvalue_output("y", ort_value(out))
    session.run_with_iobinding(binding)
    return out


# The ONNX Runtime library holds its own copy of the kernels and dispatches
# to its default target (set_simd_target acts on opbridge._C).
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_ort_half_rms_norm_single_node(dtype):
    onnx_type = ONNX_TYPES[dtype]
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 67, generator=g, dtype=torch.float64).to(dtype)
    w = (1 + 0.1 * torch.randn(67, generator=g, dtype=torch.float64)).to(dtype)
    b = (0.1 * torch.randn(67, generator=g, dtype=torch.float64)).to(dtype)
    model = single_node_model(
        "RmsNorm",
        [("x", onnx_type, [4, 67]), ("weight", onnx_type, [67]), ("bias", onnx_type, [67])],
        {"eps": 1e-6},
        output_type=onnx_type,
    )
    y = run_ort(model, [x, w, b], (4, 67), dtype)
    close(y, rms_norm_ref(x, w, b), dtype)
    torch.testing.assert_close(y, opbridge.rms_norm(x, w, b), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_ort_half_scaled_clamp_single_node(dtype):
    onnx_type = ONNX_TYPES[dtype]
    x = (8 * torch.randn(5, 33, dtype=torch.float64)).to(dtype)
    model = single_node_model(
        "ScaledClamp",
        [("x", onnx_type, [5, 33])],
        {"scale": 0.5, "min_val": 0.0, "max_val": 6.0},
        output_type=onnx_type,
    )
    y = run_ort(model, [x], (5, 33), dtype)
    close(y, clamp_ref(x), dtype)
    torch.testing.assert_close(y, opbridge.scaled_clamp(x, 0.5, 0.0, 6.0), atol=0, rtol=0)


@pytest.mark.parametrize("cols", [4096, 4100])
def test_outputs_larger_than_the_cache_match_the_reference(cols):
    # Past the last-level cache size the kernels write with non-temporal
    # stores (aligned rows) and regular stores (the rest).
    g = torch.Generator().manual_seed(5)
    rows = 2304
    x = torch.randn(rows, cols, generator=g)
    w = 1 + 0.1 * torch.randn(cols, generator=g)
    close(opbridge.rms_norm(x, w), rms_norm_ref(x, w), torch.float32)
    close(opbridge.scaled_clamp(x, 4.0, -1.0, 2.0), clamp_ref(x, 4.0, -1.0, 2.0), torch.float32)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    grad = torch.randn(rows, cols, generator=g)
    gx, gw = torch.autograd.grad(opbridge.rms_norm(xg, wg), (xg, wg), grad)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    rx, rw = torch.autograd.grad(rms_norm_ref(x64, w64), (x64, w64), grad.double())
    close(gx, rx, torch.float32, scale=4.0)
    close(gw, rw, torch.float32, scale=4.0 * rows)
    (gc,) = torch.autograd.grad(opbridge.scaled_clamp(xg, 4.0, -1.0, 2.0), (xg,), grad)
    inside = (x.double() * 4 >= -1) & (x.double() * 4 <= 2)
    torch.testing.assert_close(gc.double(), grad.double() * 4 * inside, atol=0, rtol=0)
