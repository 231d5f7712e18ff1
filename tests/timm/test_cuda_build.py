"""The CUDA build, checked without a GPU.

This environment's torch is a CUDA build, so ``./dev timm`` builds opbridge
here with ``OPBRIDGE_CUDA=ON``: every ``kernel.cu`` compiled by nvcc, the
PyTorch adapter's CUDA dispatch and the ONNX Runtime library's CUDA
execution-provider ops compiled and linked. Nothing CUDA can run on these
machines: the numbers on a GPU come from ``scripts/gpu_check.sh``
(``tests/gpu``). What is checked here is everything short of running a
kernel: the registrations, the Meta path that fake CUDA tensors take under
torch.compile/torch.export, and that the CPU path of the same build (PyTorch
and ONNX Runtime) is unchanged."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import opbridge
from opbridge.ops import card
from opbridge.sdk import testing

OPS = sorted(opbridge.specs())


def test_the_build_has_cuda():
    assert torch.version.cuda, "this environment's torch should be a CUDA build"
    assert opbridge._C.BUILD_CUDA


@pytest.mark.parametrize("name", OPS)
def test_every_op_and_its_backward_dispatch_to_cuda(name):
    spec = opbridge.specs()[name]
    assert spec["cuda"], f"opbridge::{name}: no CUDA kernels registered (kernel.cu)"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"opbridge::{name}", "CUDA")
    if spec["backward_schema"]:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"opbridge::{name}_backward", "CUDA")


def _fake(value, mode):
    if isinstance(value, torch.Tensor):
        return mode.from_tensor(value.detach())
    if isinstance(value, tuple | list):
        return type(value)(_fake(v, mode) for v in value)
    return value


def _to_cuda(value):
    if isinstance(value, torch.Tensor):
        return value.to("cuda")
    if isinstance(value, tuple | list):
        return type(value)(_to_cuda(v) for v in value)
    return value


@pytest.mark.parametrize("name", OPS)
def test_fake_cuda_tensors_get_cuda_outputs_of_the_cpu_shapes(name):
    c = card(name)
    sample = next(iter(c.samples(torch.float32, False, large=False)))
    expected = c.call(*sample.args, **sample.kwargs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    fakes = _fake(sample.args, mode)
    with mode:
        outputs = c.call(*_to_cuda(fakes), **sample.kwargs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for out, ref in zip(outputs, expected, strict=True):
        assert out.device.type == "cuda"
        assert out.shape == ref.shape and out.dtype == ref.dtype


@pytest.mark.parametrize("name", OPS)
def test_cpu_kernels_of_the_cuda_build(name):
    testing.check_reference(card(name), dtypes=(torch.float32,))


@pytest.mark.parametrize("name", ["rms_norm", "add_layer_norm", "normalize_image"])
def test_ort_library_with_cuda_ops_runs_on_the_cpu(name):
    # The library registers each op for the CPU and the CUDA execution
    # provider; a CPU session picks the CPU kernels.
    testing.check_export(card(name), route="custom")
