"""The operators in PyTorch: numbers, autograd, opcheck, compile, export."""

from __future__ import annotations

import pytest
import torch

import opbridge

from op_cases import OPS, tolerances

DTYPES = [torch.float32, torch.float64]
op_names = pytest.mark.parametrize("name", list(OPS))


def _detached(sample):
    def d(v):
        return v.detach() if isinstance(v, torch.Tensor) else v

    return tuple(d(a) for a in sample.args), {k: d(v) for k, v in sample.kwargs.items()}


@op_names
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_reference(name, dtype):
    case = OPS[name]
    count = 0
    for sample in case.samples(dtype):
        args, kwargs = _detached(sample)
        got = case.call(*args, **kwargs)
        expected = case.reference(*args, **kwargs)
        assert got.dtype == dtype and got.shape == expected.shape, sample.label
        assert got.is_contiguous()
        torch.testing.assert_close(got, expected, **tolerances(dtype), msg=sample.label)
        count += 1
    assert count >= 7


@op_names
def test_gradients_match_reference(name):
    case = OPS[name]
    for sample in case.samples(torch.float64, requires_grad=True, large=False):
        tensors = [a for a in sample.args if isinstance(a, torch.Tensor) and a.requires_grad]
        grad_out = torch.randn_like(case.reference(*sample.args, **sample.kwargs))
        got = torch.autograd.grad(case.call(*sample.args, **sample.kwargs), tensors, grad_out)
        expected = torch.autograd.grad(
            case.reference(*sample.args, **sample.kwargs), tensors, grad_out
        )
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, atol=1e-10, rtol=1e-9, msg=sample.label)


@op_names
def test_gradcheck_float64(name):
    case = OPS[name]
    for sample in case.samples(torch.float64, requires_grad=True, large=False):
        if name == "scaled_clamp":
            # Keep away from the clamp's kinks, where the derivative jumps.
            x = sample.args[0].detach()
            lo = sample.kwargs.get("min_val", sample.args[2] if len(sample.args) > 2 else 0.0)
            hi = sample.kwargs.get("max_val", sample.args[3] if len(sample.args) > 3 else 6.0)
            v = x * sample.args[1]
            if bool(((v - lo).abs() < 1e-3).any() or ((v - hi).abs() < 1e-3).any()):
                continue
        assert torch.autograd.gradcheck(
            lambda *a, s=sample: case.call(*a, **s.kwargs), sample.args, eps=1e-6, atol=1e-5
        ), sample.label


@op_names
def test_opcheck(name):
    case = OPS[name]
    op = getattr(torch.ops.opbridge, name).default
    for requires_grad in (False, True):
        for sample in case.samples(torch.float32, requires_grad=requires_grad, large=False):
            torch.library.opcheck(op, sample.args, sample.kwargs)


def test_rms_norm_gradient_of_each_input_float64():
    x = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(opbridge.rms_norm, (x, w, b, 1e-5))
    # Only the bias needs a gradient: the others stay None.
    x2, w2 = x.detach(), w.detach()
    (gb,) = torch.autograd.grad(opbridge.rms_norm(x2, w2, b).sum(), [b])
    torch.testing.assert_close(gb, torch.full_like(b, 5.0))


@op_names
def test_torch_compile_fullgraph(name):
    case = OPS[name]
    torch._dynamo.reset()
    compiled = torch.compile(case.call, fullgraph=True, dynamic=True)
    samples = list(case.samples(torch.float32, requires_grad=True, large=False))
    for sample in samples[1:4]:
        got = compiled(*sample.args, **sample.kwargs)
        expected = case.reference(*sample.args, **sample.kwargs)
        torch.testing.assert_close(got, expected, **tolerances(torch.float32))
        tensors = [a for a in sample.args if isinstance(a, torch.Tensor) and a.requires_grad]
        g_got = torch.autograd.grad(got.sum(), tensors)
        g_exp = torch.autograd.grad(expected.sum(), tensors)
        for a, b in zip(g_got, g_exp, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


class _Wrap(torch.nn.Module):
    def __init__(self, fn, extra):
        super().__init__()
        self.fn = fn
        self.extra = extra

    def forward(self, x, *tensors):
        return self.fn(x, *tensors, *self.extra)


@op_names
def test_torch_export(name):
    case = OPS[name]
    sample = next(s for s in case.samples(torch.float32) if s.label.startswith("typical"))
    tensors = [a for a in sample.args if isinstance(a, torch.Tensor)]
    scalars = [a for a in sample.args if not isinstance(a, torch.Tensor)]
    module = _Wrap(case.call, scalars)
    batch = torch.export.Dim("batch", min=1, max=64)
    rest = (None,) * (len(tensors) - 1)
    dynamic = ({0: batch}, rest) if rest else ({0: batch},)
    program = torch.export.export(module, tuple(tensors), dynamic_shapes=dynamic)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert f"opbridge.{name}.default" in targets
    x7 = torch.randn(7, *tensors[0].shape[1:])
    torch.testing.assert_close(
        program.module()(x7, *tensors[1:]), case.reference(x7, *tensors[1:], *scalars)
    )


# --------------------------------------------------------------- bad input


def test_integer_dtype_is_rejected():
    with pytest.raises(
        RuntimeError,
        match=r"scaled_clamp.*argument 'x' must be float32, float64, float16 or bfloat16, got int6",
    ):
        opbridge.scaled_clamp(torch.arange(4), 1.0)
    with pytest.raises(
        RuntimeError,
        match=r"rms_norm.*argument 'x' must be float32, float64, float16 or bfloat16, got int32",
    ):
        opbridge.rms_norm(torch.ones(2, 3, dtype=torch.int32), torch.ones(3, dtype=torch.int32))


def test_weight_of_wrong_length_is_rejected():
    with pytest.raises(
        RuntimeError,
        match=r"rms_norm.*argument 'weight' must be 1-D with 8 elements .*got shape \[7\]",
    ):
        opbridge.rms_norm(torch.randn(2, 8), torch.ones(7))
    with pytest.raises(RuntimeError, match=r"argument 'bias' must be 1-D with 8 elements"):
        opbridge.rms_norm(torch.randn(2, 8), torch.ones(8), torch.ones(2, 4))
    with pytest.raises(
        RuntimeError, match=r"argument 'weight' must have the dtype of x \(float32\), got float64"
    ):
        opbridge.rms_norm(torch.randn(2, 8), torch.ones(8, dtype=torch.float64))


def test_zero_dim_input():
    with pytest.raises(
        RuntimeError, match=r"rms_norm.*argument 'x' must have at least 1 dimension, got a 0-d"
    ):
        opbridge.rms_norm(torch.tensor(1.0), torch.ones(1))
    # Elementwise: a 0-d tensor is fine.
    assert opbridge.scaled_clamp(torch.tensor(2.0), 2.0).item() == 4.0


def test_errors_also_raise_under_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(RuntimeError, match="argument 'weight'"):
        opbridge.rms_norm(torch.randn(2, 8), torch.ones(7))


@op_names
def test_nan_and_inf_follow_the_reference(name):
    case = OPS[name]
    x = torch.randn(4, 8)
    x[0, 1] = float("nan")
    x[1, 2] = float("inf")
    x[2, 3] = -float("inf")
    args = (x, 2.0) if name == "scaled_clamp" else (x, torch.ones(8))
    torch.testing.assert_close(case.call(*args), case.reference(*args), equal_nan=True)


def test_empty_tensors():
    assert opbridge.scaled_clamp(torch.empty(0, 3), 1.0).shape == (0, 3)
    assert opbridge.rms_norm(torch.empty(0, 3), torch.ones(3)).shape == (0, 3)
    assert opbridge.rms_norm(torch.empty(2, 0), torch.ones(0)).shape == (2, 0)
