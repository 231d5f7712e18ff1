"""bias_gelu, add_rms_norm, rotary_embedding and normalize_image on every
SIMD target and in every dtype, in PyTorch and in ONNX Runtime, against a
float64 reference; and results that do not depend on the thread count."""

from __future__ import annotations

import importlib

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto

import opbridge
from opbridge import _C

from ort_helpers import single_node_model

# The card modules (opbridge.ops exports the op functions under these names).
bias_gelu_card = importlib.import_module("opbridge.ops.bias_gelu")
add_rms_norm_card = importlib.import_module("opbridge.ops.add_rms_norm")
rotary_card = importlib.import_module("opbridge.ops.rotary_embedding")
normalize_image_card = importlib.import_module("opbridge.ops.normalize_image")

TARGETS = _C.simd_targets()
HALF = [torch.float16, torch.bfloat16]
DTYPES = [torch.float32, torch.float64, *HALF]
# atol = rtol: a few units in the last place of the dtype's rounding of O(1) values.
TOL = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}
CARDS = {
    "bias_gelu": bias_gelu_card,
    "add_rms_norm": add_rms_norm_card,
    "rotary_embedding": rotary_card,
    "normalize_image": normalize_image_card,
}


@pytest.fixture
def target(request):
    _C.set_simd_target(request.param)
    yield request.param
    _C.set_simd_target("")


def close(got, want, dtype, scale=1.0, what=""):
    tol = TOL[dtype] * scale
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol, msg=lambda m: f"{what}: {m}")


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def reference64(name, args, kwargs, dtype):
    """The card's reference in float64 on the same (rounded) inputs; the sum
    that add_rms_norm returns is rounded to the dtype, as the op's is."""
    args64 = [a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
    if name == "add_rms_norm":
        total = (args64[0] + args64[1]).to(dtype).double()
        rest = args64[2:]
        normed = add_rms_norm_card.rms_norm_reference(total, *rest, **kwargs)
        return normed, total
    return as_tuple(CARDS[name].reference(*args64, **kwargs))


def differentiable(args):
    return [a for a in args if torch.is_tensor(a) and a.requires_grad]


# Per op, what a gradient sums over: elementwise gradients are a few ulp;
# parameter and table gradients add up to `rows` terms.
def reduction_rows(name, args):
    x = args[0]
    if name == "rotary_embedding":
        return x.shape[0] * x.shape[2]
    return max(1, x.numel() // x.shape[-1])


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CARDS))
def test_forward_and_backward_every_target(target, dtype, name):
    assert _C.simd_target() == target
    card = CARDS[name].CARD
    for sample in card.samples(dtype, True, large=False, seed=7):
        args, kwargs = list(sample.args), dict(sample.kwargs)
        outs = as_tuple(card.call(*args, **kwargs))
        want = reference64(
            name, [a.detach() if torch.is_tensor(a) else a for a in args], kwargs, dtype
        )
        for got, ref in zip(outs, want, strict=True):
            assert got.dtype == dtype, sample.label
            close(got, ref, dtype, what=f"{sample.label} forward")

        inputs = differentiable(args)
        if not inputs:
            continue
        g = torch.Generator().manual_seed(11)
        grads_out = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(dtype) for o in outs]
        got_grads = torch.autograd.grad(outs, inputs, grads_out)
        args64 = [
            a.detach().double().requires_grad_(a.requires_grad)
            if torch.is_tensor(a) and a.is_floating_point()
            else a
            for a in args
        ]
        want_out = reference64(name, args64, kwargs, dtype)
        want_grads = torch.autograd.grad(
            want_out, differentiable(args64), [t.double() for t in grads_out], allow_unused=True
        )
        rows = reduction_rows(name, args)
        for i, (got, ref) in enumerate(zip(got_grads, want_grads, strict=True)):
            if ref is None:
                continue
            elementwise = inputs[i].shape == args[0].shape
            close(
                got,
                ref,
                dtype,
                scale=4.0 if elementwise else 4.0 * rows,
                what=f"{sample.label} grad {i}",
            )


def test_gelu_keeps_the_exact_forms_in_float32():
    # The erf and tanh forms, far out on both tails and near zero, against
    # float64; and the two forms differ (each is really computed).
    x = torch.linspace(-10, 10, 4001, dtype=torch.float64)
    bias = torch.zeros(4001, dtype=torch.float64)
    for approximate in ("none", "tanh"):
        got = opbridge.bias_gelu(x.float()[None], bias.float(), approximate)[0]
        want = torch.nn.functional.gelu(x, approximate=approximate)
        close(got, want, torch.float32, what=approximate)
    erf_form = opbridge.bias_gelu(x.float()[None], bias.float())
    tanh_form = opbridge.bias_gelu(x.float()[None], bias.float(), "tanh")
    assert (erf_form - tanh_form).abs().max() > 1e-4


def interleaved_rotary_sample(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 3, 20, generator=g, dtype=torch.float64).to(dtype)
    angles = torch.rand(5, 9, generator=g, dtype=torch.float64) * 6.3
    return x, angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_interleaved_partial_with_table_gradients(target, dtype):
    # rotary_dim 18 of head_dim 20: pairs that straddle vectors and a
    # pass-through tail, at every vector width.
    x, cos, sin = (t.requires_grad_() for t in interleaved_rotary_sample(dtype))
    y = opbridge.rotary_embedding(x, cos, sin, True)
    x64, cos64, sin64 = (t.detach().double().requires_grad_() for t in (x, cos, sin))
    want = rotary_card.reference(x64, cos64, sin64, True)
    close(y, want.detach(), dtype)
    grad = torch.randn(y.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    got = torch.autograd.grad(y, (x, cos, sin), grad.to(dtype))
    ref = torch.autograd.grad(want, (x64, cos64, sin64), grad.to(dtype).double())
    close(got[0], ref[0], dtype, scale=4.0)
    close(got[1], ref[1], dtype, scale=4.0 * 6)
    close(got[2], ref[2], dtype, scale=4.0 * 6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_results_do_not_depend_on_thread_count(dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(517, 300, generator=g).to(dtype).requires_grad_()
    residual = torch.randn(517, 300, generator=g).to(dtype).requires_grad_()
    w = torch.randn(300, generator=g).to(dtype).requires_grad_()
    xr = torch.randn(3, 173, 4, 64, generator=g).to(dtype).requires_grad_()
    cos = torch.randn(173, 32, generator=g).to(dtype).requires_grad_()
    sin = torch.randn(173, 32, generator=g).to(dtype).requires_grad_()
    grad = torch.randn(517, 300, generator=g).to(dtype)
    grad_r = torch.randn(3, 173, 4, 64, generator=g).to(dtype)

    def run():
        y = opbridge.bias_gelu(x, w)
        out, total = opbridge.add_rms_norm(x, residual, w)
        r = opbridge.rotary_embedding(xr, cos, sin)
        return (
            y,
            *torch.autograd.grad(y, (x, w), grad),
            out,
            total,
            *torch.autograd.grad((out, total), (x, residual, w), (grad, grad)),
            r,
            *torch.autograd.grad(r, (xr, cos, sin), grad_r),
        )

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run()
        torch.set_num_threads(max(2, threads))
        many = run()
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, many, strict=True):
        assert torch.equal(a, b)


def test_outputs_larger_than_the_cache_match_the_reference():
    # Past the last-level cache size the kernels write with non-temporal
    # stores; rows of 4100 leave every other row unaligned.
    g = torch.Generator().manual_seed(6)
    for cols in (4096, 4100):
        x = torch.randn(1200, cols, generator=g)
        res = torch.randn(1200, cols, generator=g)
        w = 1 + 0.1 * torch.randn(cols, generator=g)
        close(
            opbridge.bias_gelu(x, w),
            bias_gelu_card.reference(x.double(), w.double()),
            torch.float32,
        )
        out, total = opbridge.add_rms_norm(x, res, w)
        want_out, want_total = reference64("add_rms_norm", [x, res, w], {}, torch.float32)
        close(out, want_out, torch.float32)
        close(total, want_total, torch.float32)
    x = torch.randn(1, 1024, 16, 128, generator=g)
    cos, sin = torch.randn(1024, 64, generator=g), torch.randn(1024, 64, generator=g)
    want = rotary_card.reference(x.double(), cos.double(), sin.double())
    close(opbridge.rotary_embedding(x, cos, sin), want, torch.float32)
    image = torch.randint(0, 256, (2, 1024, 1000, 3), generator=g, dtype=torch.uint8)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    want = normalize_image_card.reference(image.double(), mean, std)
    close(opbridge.normalize_image(image, mean, std), want, torch.float32)


# ---------------------------------------------------------------- ONNX Runtime

ONNX_TYPES = {torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16}


def ort_value(t: torch.Tensor):
    """An OrtValue sharing t's storage (bfloat16 goes in as its bits)."""
    if t.dtype == torch.bfloat16:
        bits = t.contiguous().view(torch.int16).numpy().view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(t.contiguous().numpy())


def run_ort(model, inputs: list[torch.Tensor], outputs: list[tuple[str, torch.Tensor]]):
    session = opbridge.runtimes.onnxruntime.InferenceSession(model)
    binding = session.io_binding()
    for meta, t in zip(session.get_inputs(), inputs, strict=True):
        binding.bind_ortvalue_input(meta.name, ort_value(t))
    for name, out in outputs:
        binding.bind_ortvalue_output(name, ort_value(out))
    session.run_with_iobinding(binding)


def half_case(name, dtype):
    """(op type, inputs as (name, tensor), attributes, outputs as torch
    results, reference outputs) for one typical call."""
    g = torch.Generator().manual_seed(8)

    def randn(*shape, scale=1.0):
        return (scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)

    if name == "bias_gelu":
        x, b = randn(4, 67, scale=2.0), randn(67)
        return (
            "BiasGelu",
            [("x", x), ("bias", b)],
            {"approximate": "tanh"},
            opbridge.bias_gelu(x, b, "tanh"),
        )
    if name == "add_rms_norm":
        x, r, w, b = randn(4, 67), randn(4, 67), 1 + randn(67, scale=0.1), randn(67, scale=0.1)
        return (
            "AddRmsNorm",
            [("x", x), ("residual", r), ("weight", w), ("bias", b)],
            {"eps": 1e-6},
            (opbridge.add_rms_norm(x, r, w, b, 1e-6)),
        )
    if name == "rotary_embedding":
        x, cos, sin = interleaved_rotary_sample(dtype)
        inputs = [("x", x), ("cos", cos), ("sin", sin)]
        return (
            "RotaryEmbedding",
            inputs,
            {"interleaved": 1},
            opbridge.rotary_embedding(x, cos, sin, True),
        )
    image = torch.randint(0, 256, (2, 5, 9, 3), generator=g).to(dtype)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    attrs = {"mean": mean, "std": std, "channels_last_in": 1}
    return "NormalizeImage", [("image", image)], attrs, opbridge.normalize_image(image, mean, std)


# The ONNX Runtime library holds its own copy of the kernels and dispatches
# to its default target, as opbridge._C does by default: same bits.
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(CARDS))
def test_ort_half_single_node_matches_torch(name, dtype):
    onnx_type = ONNX_TYPES[dtype]
    op_type, inputs, attrs, torch_out = half_case(name, dtype)
    torch_out = as_tuple(torch_out)
    out_names = ["out", "residual_out"] if name == "add_rms_norm" else ["y"]
    model = single_node_model(
        op_type,
        [(n, onnx_type, list(t.shape)) for n, t in inputs],
        attrs,
        outputs=[(n, onnx_type) for n in out_names],
    )
    got = [torch.empty_like(t) for t in torch_out]
    run_ort(model, [t for _, t in inputs], list(zip(out_names, got, strict=True)))
    for g, want in zip(got, torch_out, strict=True):
        assert torch.equal(g, want), name
    kwargs = {"approximate": "tanh"} if name == "bias_gelu" else {}
    args = [t for _, t in inputs]
    if name == "rotary_embedding":
        args.append(True)
    if name == "normalize_image":
        args += [attrs["mean"], attrs["std"]]
    if name == "add_rms_norm":
        args.append(1e-6)
    for g, want in zip(got, reference64(name, args, kwargs, dtype), strict=True):
        close(g, want, dtype, what=name)
