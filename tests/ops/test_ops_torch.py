"""The operators in PyTorch: numbers, autograd, opcheck, compile, export."""

from __future__ import annotations

import pytest
import torch

import opbridge

from op_cases import OPS, as_tuple, tolerances

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
        outputs = as_tuple(case.call(*args, **kwargs))
        expected_outputs = as_tuple(case.reference(*args, **kwargs))
        assert len(outputs) == len(expected_outputs)
        for got, expected in zip(outputs, expected_outputs, strict=True):
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
        expected_outputs = as_tuple(case.reference(*sample.args, **sample.kwargs))
        grad_out = [torch.randn_like(e) for e in expected_outputs]
        got = torch.autograd.grad(
            as_tuple(case.call(*sample.args, **sample.kwargs)), tensors, grad_out
        )
        expected = torch.autograd.grad(expected_outputs, tensors, grad_out)
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
    op = getattr(getattr(torch.ops, case.namespace), case.name).default
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
        got = as_tuple(compiled(*sample.args, **sample.kwargs))
        expected = as_tuple(case.reference(*sample.args, **sample.kwargs))
        torch.testing.assert_close(got, expected, **tolerances(torch.float32))
        tensors = [a for a in sample.args if isinstance(a, torch.Tensor) and a.requires_grad]
        if not tensors:
            continue
        g_got = torch.autograd.grad(sum(o.sum() for o in got), tensors)
        g_exp = torch.autograd.grad(sum(o.sum() for o in expected), tensors)
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
    # Tensors shaped like x (e.g. add_rms_norm's residual) share its batch.
    batched = [t.shape == tensors[0].shape for t in tensors]
    rest = tuple({0: batch} if b else None for b in batched[1:])
    dynamic = ({0: batch}, rest) if rest else ({0: batch},)
    program = torch.export.export(module, tuple(tensors), dynamic_shapes=dynamic)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert f"opbridge.{name}.default" in targets
    inputs7 = [
        torch.randn(7, *t.shape[1:]) if b else t for t, b in zip(tensors, batched, strict=True)
    ]
    torch.testing.assert_close(program.module()(*inputs7), case.reference(*inputs7, *scalars))


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


@pytest.mark.parametrize("name", ["scaled_clamp", "rms_norm"])
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


# ------------------------------------------------- bad input, newer operators

BAD_INPUTS = [
    (
        "add_rms_norm residual shape",
        lambda: opbridge.add_rms_norm(torch.randn(2, 8), torch.randn(2, 7), torch.ones(8)),
        r"add_rms_norm.*argument 'residual' must have the shape of x \[2, 8\], got shape \[2, 7\]",
    ),
    (
        "add_rms_norm weight length",
        lambda: opbridge.add_rms_norm(torch.randn(2, 8), torch.randn(2, 8), torch.ones(4)),
        r"add_rms_norm.*argument 'weight' must be 1-D with 8 elements .*got shape \[4\]",
    ),
    (
        "add_rms_norm dtype",
        lambda: opbridge.add_rms_norm(
            torch.randn(2, 8), torch.randn(2, 8, dtype=torch.float64), torch.ones(8)
        ),
        r"argument 'residual' must have the dtype of x \(float32\), got float64",
    ),
    (
        "bias_gelu approximate",
        lambda: opbridge.bias_gelu(torch.randn(2, 8), torch.zeros(8), "fast"),
        r"bias_gelu.*argument 'approximate' must be 'none' or 'tanh', got 'fast'",
    ),
    (
        "bias_gelu bias length",
        lambda: opbridge.bias_gelu(torch.randn(2, 8), torch.zeros(3)),
        r"bias_gelu.*argument 'bias' must be 1-D with 8 elements .*got shape \[3\]",
    ),
    (
        "bias_gelu integer",
        lambda: opbridge.bias_gelu(torch.ones(2, 8, dtype=torch.int64), torch.ones(8)),
        r"argument 'x' must be float32, float64, float16 or bfloat16, got int64",
    ),
    (
        "rotary rank",
        lambda: opbridge.rotary_embedding(torch.randn(2, 5, 8), torch.ones(5, 4), torch.ones(5, 4)),
        r"rotary_embedding.*argument 'x' must be 4-D \[batch, seq, heads, head_dim\], got 3-D",
    ),
    (
        "rotary odd head_dim",
        lambda: opbridge.rotary_embedding(
            torch.randn(2, 5, 3, 7), torch.ones(5, 3), torch.ones(5, 3)
        ),
        r"argument 'x' must have an even head_dim \(last dimension\), got shape \[2, 5, 3, 7\]",
    ),
    (
        "rotary seq",
        lambda: opbridge.rotary_embedding(
            torch.randn(2, 5, 3, 8), torch.ones(9, 4), torch.ones(9, 4)
        ),
        r"argument 'cos' must have seq = 5 rows \(dimension 1 of x \[2, 5, 3, 8\]\), "
        r"got shape \[9, 4\]",
    ),
    (
        "rotary too wide",
        lambda: opbridge.rotary_embedding(
            torch.randn(2, 5, 3, 8), torch.ones(5, 8), torch.ones(5, 8)
        ),
        r"argument 'cos' must have between 1 and head_dim / 2 = 4 columns",
    ),
    (
        "rotary sin mismatch",
        lambda: opbridge.rotary_embedding(
            torch.randn(2, 5, 3, 8), torch.ones(5, 4), torch.ones(5, 2)
        ),
        r"argument 'sin' must have the shape of cos \[5, 4\], got shape \[5, 2\]",
    ),
    (
        "rotary per-batch batch",
        lambda: opbridge.rotary_embedding(
            torch.randn(2, 5, 3, 8), torch.ones(3, 5, 4), torch.ones(3, 5, 4)
        ),
        r"argument 'cos' must have batch = 2 \(dimension 0 of x \[2, 5, 3, 8\]\) or 1 when 3-D "
        r"\[batch, seq, rotary_dim / 2\], got shape \[3, 5, 4\]",
    ),
    (
        "rotary per-batch seq",
        lambda: opbridge.rotary_embedding(
            torch.randn(2, 5, 3, 8), torch.ones(2, 6, 4), torch.ones(2, 6, 4)
        ),
        r"argument 'cos' must have seq = 5 rows \(dimension 1 of x \[2, 5, 3, 8\]\), "
        r"got shape \[2, 6, 4\]",
    ),
    (
        "rotary per-batch sin rank",
        lambda: opbridge.rotary_embedding(
            torch.randn(2, 5, 3, 8), torch.ones(2, 5, 4), torch.ones(5, 4)
        ),
        r"argument 'sin' must have the shape of cos \[2, 5, 4\], got shape \[5, 4\]",
    ),
    (
        "rotary table rank",
        lambda: opbridge.rotary_embedding(torch.randn(2, 5, 3, 8), torch.ones(4), torch.ones(4)),
        r"argument 'cos' must be 2-D \[seq, rotary_dim / 2\] or 3-D \[batch, seq, "
        r"rotary_dim / 2\], got 1-D shape \[4\]",
    ),
    (
        "normalize_image channels",
        lambda: opbridge.normalize_image(
            torch.zeros(1, 4, 4, 3, dtype=torch.uint8), [0.5, 0.5], [0.5, 0.5]
        ),
        r"normalize_image.*argument 'mean' must have one value per channel \(3, dimension 3 "
        r"of image \[1, 4, 4, 3\] read as \[N, H, W, C\]\), got 2 values",
    ),
    (
        "normalize_image std zero",
        lambda: opbridge.normalize_image(
            torch.zeros(1, 4, 4, 2, dtype=torch.uint8), [0.5, 0.5], [0.5, 0.0]
        ),
        r"argument 'std' must be finite and non-zero for every channel, got 0 for channel 1",
    ),
    (
        "normalize_image rank",
        lambda: opbridge.normalize_image(
            torch.zeros(4, 4, 3, dtype=torch.uint8), [0.5] * 3, [1] * 3
        ),
        r"argument 'image' must be 4-D \[N, H, W, C\] or \[N, C, H, W\], got 3-D shape \[4, 4, 3\]",
    ),
    (
        "normalize_image dtype",
        lambda: opbridge.normalize_image(torch.zeros(1, 2, 2, 1, dtype=torch.int32), [0.5], [1.0]),
        r"argument 'image' must be uint8, float32, float64, float16 or bfloat16, got int32",
    ),
]


@pytest.mark.parametrize(("label", "call", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_a_clear_error(label, call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


@pytest.mark.parametrize(("label", "call", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_a_clear_error_under_fake_tensors(label, call, message):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(RuntimeError, match=message):
        call()


def test_add_rms_norm_gradient_through_residual_out_only():
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    r = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    _, residual_out = opbridge.add_rms_norm(x, r, w)
    gx, gr, gw = torch.autograd.grad(residual_out.sum(), [x, r, w], allow_unused=True)
    torch.testing.assert_close(gx, torch.ones_like(x))
    torch.testing.assert_close(gr, torch.ones_like(r))
    torch.testing.assert_close(gw, torch.zeros_like(w))


def test_rotary_embedding_preserves_pair_norms_and_is_identity_at_angle_zero():
    x = torch.randn(2, 6, 3, 8)
    angles = torch.rand(6, 4) * 6
    y = opbridge.rotary_embedding(x, angles.cos(), angles.sin())
    torch.testing.assert_close(
        x[..., :4] ** 2 + x[..., 4:] ** 2, y[..., :4] ** 2 + y[..., 4:] ** 2, atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(
        opbridge.rotary_embedding(x, torch.ones(6, 4), torch.zeros(6, 4), True), x
    )


def test_normalize_image_float_input_means_0_to_255_scale():
    pixels = torch.randint(0, 256, (2, 5, 4, 3), dtype=torch.uint8)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    from_uint8 = opbridge.normalize_image(pixels, mean, std)
    from_float = opbridge.normalize_image(pixels.float(), mean, std)
    assert from_uint8.dtype == torch.float32 and from_uint8.shape == (2, 3, 5, 4)
    torch.testing.assert_close(from_uint8, from_float)
    assert opbridge.normalize_image(pixels.double(), mean, std).dtype == torch.float64
