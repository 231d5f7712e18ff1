"""opbridge's CUDA kernels against its CPU kernels and a float64 reference,
through PyTorch: every operator, every dtype, odd sizes and long rows,
forward and backward, plus opcheck, gradcheck and torch.compile on CUDA
tensors.

Needs a GPU and opbridge built with OPBRIDGE_CUDA=ON against a CUDA build of
torch: ``scripts/gpu_check.sh`` builds it and runs this file. The main test
run ignores ``tests/gpu``.
"""

from __future__ import annotations

import pytest
import torch

import opbridge
from opbridge.ops import card

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (scripts/gpu_check.sh)"
)

OPS = sorted(opbridge.specs())
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# CUDA vs CPU kernel, both computing in float32 (float64) but summing in
# another order: a few float32 ulps, one rounding step of the 16-bit types.
TOLERANCE = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float64: {"atol": 1e-12, "rtol": 1e-12},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
}
# Odd sizes and long rows, as [rows, cols] for the cards' bench_inputs.
SHAPES = [[1, 1], [3, 7], [5, 33], [2, 1023], [7, 1025], [3, 4097], [2, 65537], [4099, 24]]


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


def _to(value, device, dtype=None):
    if isinstance(value, torch.Tensor):
        moved = value.detach().to(device)
        if dtype is not None and moved.is_floating_point():
            moved = moved.to(dtype)
        return moved.requires_grad_(value.requires_grad and moved.is_floating_point())
    if isinstance(value, tuple | list):
        return type(value)(_to(v, device, dtype) for v in value)
    return value


def _cuda_samples(name, dtype, requires_grad=False):
    for sample in card(name).samples(dtype, requires_grad, large=True):
        yield sample, _to(sample.args, "cpu"), _to(sample.args, "cuda")


def _close(actual, expected, dtype, what):
    for i, (a, e) in enumerate(zip(_as_tuple(actual), _as_tuple(expected), strict=True)):
        torch.testing.assert_close(
            a.cpu(), e.cpu(), **TOLERANCE[dtype], msg=lambda m, i=i: f"{what}, output {i}: {m}"
        )


def _weights(outputs, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(o.shape, generator=generator, dtype=torch.float32).to(o.dtype)
        for o in _as_tuple(outputs)
    ]


def _grads(call, args, kwargs, weights):
    outputs = _as_tuple(call(*args, **kwargs))
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    if not leaves:
        return ()
    loss = sum(
        (o.float() * w.to(o.device).float()).sum() for o, w in zip(outputs, weights, strict=True)
    )
    return torch.autograd.grad(loss, leaves, allow_unused=True)


def test_every_op_has_cuda_kernels():
    assert opbridge._C.BUILD_CUDA
    for name, spec in opbridge.specs().items():
        assert spec["cuda"], f"opbridge::{name} has no CUDA kernels"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"opbridge::{name}", "CUDA")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_forward_matches_cpu(name, dtype):
    call = card(name).call
    for sample, cpu_args, cuda_args in _cuda_samples(name, dtype):
        expected = call(*cpu_args, **sample.kwargs)
        actual = call(*cuda_args, **sample.kwargs)
        for out in _as_tuple(actual):
            assert out.is_cuda
        _close(actual, expected, dtype, f"{name} [{sample!r}, {dtype}] CUDA vs CPU")


@pytest.mark.parametrize("name", OPS)
def test_forward_matches_float64_reference(name):
    reference = card(name).reference
    call = card(name).call
    for sample, cpu_args, cuda_args in _cuda_samples(name, torch.float32):
        expected = reference(*_to(cpu_args, "cpu", torch.float64), **sample.kwargs)
        actual = call(*cuda_args, **sample.kwargs)
        for a, e in zip(_as_tuple(actual), _as_tuple(expected), strict=True):
            torch.testing.assert_close(
                a.cpu().double(),
                e,
                atol=1e-4,
                rtol=1e-4,
                msg=lambda m, s=sample: f"{name} [{s!r}]: {m}",
            )


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_odd_sizes_and_long_rows(name, shape):
    c = card(name)
    for dtype in (torch.float32, torch.bfloat16):
        args = c.bench_inputs(shape, dtype)
        args = args if isinstance(args, tuple) else (args,)
        expected = c.call(*_to(args, "cpu"))
        actual = c.call(*_to(args, "cuda"))
        _close(actual, expected, dtype, f"{name} {shape} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_backward_matches_cpu(name, dtype):
    call = card(name).call
    for sample, cpu_args, cuda_args in _cuda_samples(name, dtype, requires_grad=True):
        weights = _weights(call(*cpu_args, **sample.kwargs))
        expected = _grads(call, cpu_args, sample.kwargs, weights)
        actual = _grads(call, cuda_args, sample.kwargs, weights)
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            if e is None:
                assert a is None
                continue
            torch.testing.assert_close(
                a.cpu(),
                e,
                **TOLERANCE[dtype],
                msg=lambda m, i=i, s=sample: f"{name} [{s!r}] grad {i}: {m}",
            )


@pytest.mark.parametrize("name", [n for n in OPS if card(n).bench_backward])
def test_backward_of_many_rows_matches_cpu_and_is_deterministic(name):
    # 4099 rows: the weight, bias and table gradients sum over many chunks.
    c = card(name)
    cpu_args = c.bench_inputs([4099, 257], torch.float32, True)
    cpu_args = cpu_args if isinstance(cpu_args, tuple) else (cpu_args,)
    args = _to(cpu_args, "cuda")
    weights = _weights(c.call(*cpu_args))
    expected = _grads(c.call, cpu_args, {}, weights)
    first = _grads(c.call, args, {}, weights)
    for i, (a, e) in enumerate(zip(first, expected, strict=True)):
        if e is None:
            continue
        # Sums of thousands of terms: float32 rounding of the total.
        torch.testing.assert_close(
            a.cpu(), e, atol=1e-4, rtol=1e-5, msg=lambda m, i=i: f"{name} grad {i}: {m}"
        )
    for _ in range(3):
        again = _grads(c.call, args, {}, weights)
        for a, b in zip(first, again, strict=True):
            assert (a is None and b is None) or torch.equal(a, b), f"{name}: run-to-run"


@pytest.mark.parametrize("name", OPS)
def test_opcheck_on_cuda(name):
    op = getattr(torch.ops.opbridge, name)
    for requires_grad in (False, True):
        for sample, _, cuda_args in _cuda_samples(name, torch.float64, requires_grad):
            torch.library.opcheck(op, cuda_args, sample.kwargs)


@pytest.mark.parametrize("name", OPS)
def test_gradcheck_on_cuda(name):
    call = card(name).call
    for sample, _, cuda_args in _cuda_samples(name, torch.float64, requires_grad=True):
        positions = [
            i for i, a in enumerate(cuda_args) if isinstance(a, torch.Tensor) and a.requires_grad
        ]
        if not positions:
            continue

        def fn(*tensors, args=cuda_args, positions=positions, kwargs=sample.kwargs):
            full = list(args)
            for position, tensor in zip(positions, tensors, strict=True):
                full[position] = tensor
            return call(*full, **kwargs)

        assert torch.autograd.gradcheck(fn, tuple(cuda_args[p] for p in positions)), name


@pytest.mark.parametrize("name", OPS)
def test_compile_fullgraph_on_cuda(name):
    torch._dynamo.reset()
    call = card(name).call
    compiled = torch.compile(call, fullgraph=True, dynamic=True)
    for sample, _, cuda_args in _cuda_samples(name, torch.float32):
        _close(
            compiled(*cuda_args, **sample.kwargs),
            call(*cuda_args, **sample.kwargs),
            torch.float32,
            name,
        )


def test_runs_on_the_current_stream():
    x = torch.randn(4096, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    expected = opbridge.rms_norm(x, w)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        actual = opbridge.rms_norm(x, w)
    side.synchronize()
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


def test_mixed_devices_name_the_argument():
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(RuntimeError, match=r"rms_norm: argument 'weight' must be on cuda"):
        opbridge.rms_norm(x, torch.ones(8))


def test_bad_input_on_cuda_names_the_operator():
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(RuntimeError, match=r"opbridge::rms_norm.*weight"):
        opbridge.rms_norm(x, torch.ones(7, device="cuda"))
    with pytest.raises(RuntimeError, match=r"opbridge::rms_norm.*x"):
        opbridge.rms_norm(x.to(torch.int32), torch.ones(8, device="cuda", dtype=torch.int32))
