"""layer_norm and add_layer_norm beyond the per-op suites: every SIMD target
and dtype against a float64 reference, the 16-bit dtypes in ONNX Runtime,
the nn modules as drop-ins for torch.nn.LayerNorm, and bad input."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto

import opbridge
from opbridge import _C

from ort_helpers import run, single_node_model

TARGETS = _C.simd_targets()
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# atol = rtol: a few units in the last place of the dtype's rounding of O(1) values.
TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# Row lengths that leave a partial vector at every vector width, and one
# longer than the float32 accumulation block.
SHAPES = [(1, 1), (3, 7), (5, 37), (2, 4099)]
# (weight, bias) present
AFFINE = [(True, True), (True, False), (False, True), (False, False)]


@pytest.fixture
def target(request):
    _C.set_simd_target(request.param)
    yield request.param
    _C.set_simd_target("")


def ref(x, w=None, b=None, eps=1e-5):
    """F.layer_norm in float64."""
    return F.layer_norm(
        x.double(),
        (x.shape[-1],),
        None if w is None else w.double(),
        None if b is None else b.double(),
        eps,
    )


def close(got, want, dtype, scale=1.0):
    tol = TOL[dtype] * scale
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def _inputs(shape, dtype, seed, with_weight=True, with_bias=True):
    g = torch.Generator().manual_seed(seed)
    x = (2 * torch.randn(shape, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    w = (1 + 0.1 * torch.randn(shape[-1], generator=g, dtype=torch.float64)).to(dtype)
    b = (0.1 * torch.randn(shape[-1], generator=g, dtype=torch.float64)).to(dtype)
    grad = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, (w if with_weight else None), (b if with_bias else None), grad


def _check_grads(got, x, w, b, grad, dtype, rows, extra=None):
    """got: gradients of (x, w, b) in that order (w, b only where given)."""
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b) if t is not None]
    x64 = leaves[0]
    w64 = leaves[1] if w is not None else None
    b64 = leaves[-1] if b is not None else None
    want = torch.autograd.grad(ref(x64, w64, b64), leaves, grad.double())
    close(got[0], want[0] + (0 if extra is None else extra.double()), dtype, scale=4.0)
    # Parameter gradients sum over rows: their rounding scales with the row count.
    for g, r in zip(got[1:], want[1:], strict=True):
        close(g, r, dtype, scale=4.0 * rows)


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("affine", AFFINE, ids=["w+b", "w", "b", "plain"])
def test_layer_norm_every_target(target, dtype, shape, affine):
    assert _C.simd_target() == target
    x, w, b, grad = _inputs(shape, dtype, 1, *affine)
    leaves = [t.requires_grad_() for t in (x, w, b) if t is not None]
    y = opbridge.layer_norm(x, w, b)
    assert y.dtype == dtype
    close(y, ref(x.detach(), w, b), dtype)
    got = torch.autograd.grad(y, leaves, grad)
    _check_grads(got, x, w, b, grad, dtype, shape[0])


@pytest.mark.parametrize("target", TARGETS, indirect=True)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_add_layer_norm_every_target(target, dtype, shape):
    x, w, b, grad = _inputs(shape, dtype, 2)
    g = torch.Generator().manual_seed(3)
    residual = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    grad_sum = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    leaves = [t.requires_grad_() for t in (x, residual, w, b)]
    out, total = opbridge.add_layer_norm(x, residual, w, b)
    assert out.dtype == total.dtype == dtype
    # The sum is rounded to the dtype, exactly as an unfused add.
    torch.testing.assert_close(total, x.detach() + residual.detach(), atol=0, rtol=0)
    close(out, ref(total.detach(), w, b), dtype)
    gx, gr, gw, gb = torch.autograd.grad((out, total), leaves, (grad, grad_sum))
    assert torch.equal(gx, gr)
    _check_grads((gx, gw, gb), total.detach(), w, b, grad, dtype, shape[0], extra=grad_sum)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_matches_torch_layer_norm_exactly_enough_and_gradcheck(dtype):
    x, w, b, _ = _inputs((6, 33), dtype, 4)
    torch.testing.assert_close(
        opbridge.layer_norm(x, w, b, 1e-3), F.layer_norm(x, (33,), w, b, 1e-3)
    )
    if dtype == torch.float64:
        args = [t.requires_grad_() for t in (x, w, b)]
        assert torch.autograd.gradcheck(lambda *a: opbridge.layer_norm(*a, eps=1e-3), args)
        r = torch.randn(6, 33, dtype=dtype, requires_grad=True)
        assert torch.autograd.gradcheck(
            lambda x_, r_, w_, b_: opbridge.add_layer_norm(x_, r_, w_, b_, 1e-3),
            (args[0], r, args[1], args[2]),
        )


def test_results_do_not_depend_on_thread_count():
    x, w, b, grad = _inputs((517, 300), torch.float32, 5)
    leaves = [t.requires_grad_() for t in (x, w, b)]
    threads = torch.get_num_threads()
    outs = []
    try:
        for n in (1, max(2, threads)):
            torch.set_num_threads(n)
            y = opbridge.layer_norm(x, w, b)
            outs.append((y, *torch.autograd.grad(y, leaves, grad)))
    finally:
        torch.set_num_threads(threads)
    for first, second in zip(*outs, strict=True):
        assert torch.equal(first, second)


def test_output_larger_than_the_cache_matches_the_reference():
    # Past the last-level cache size the forward and backward write with
    # non-temporal stores.
    x, w, b, grad = _inputs((2304, 4100), torch.float32, 6)
    close(opbridge.layer_norm(x, w, b), ref(x, w, b), torch.float32)
    leaves = [t.requires_grad_() for t in (x, w, b)]
    got = torch.autograd.grad(opbridge.layer_norm(x, w, b), leaves, grad)
    _check_grads(got, x, w, b, grad, torch.float32, 2304)


# ---------------------------------------------------------------- ONNX Runtime

ONNX_TYPES = {
    torch.float32: TensorProto.FLOAT,
    torch.float64: TensorProto.DOUBLE,
    torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16,
}


def _ort_value(t: torch.Tensor):
    if t.dtype == torch.bfloat16:
        bits = t.contiguous().view(torch.int16).numpy().view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(t.contiguous().numpy())


def _ort_eps(eps: float) -> float:
    """ONNX FLOAT attributes are 32-bit: the library computes with eps
    rounded to float32 (in float64 too)."""
    return float(np.float32(eps))


def _run_bound(model, inputs, outputs):
    session = opbridge.runtimes.onnxruntime.InferenceSession(model)
    binding = session.io_binding()
    for meta, t in zip(session.get_inputs(), inputs, strict=True):
        binding.bind_ortvalue_input(meta.name, _ort_value(t))
    for meta, t in zip(session.get_outputs(), outputs, strict=True):
        binding.bind_ortvalue_output(meta.name, _ort_value(t))
    session.run_with_iobinding(binding)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ort_layer_norm_single_node_every_dtype(dtype):
    onnx_type = ONNX_TYPES[dtype]
    x, w, b, _ = _inputs((4, 67), dtype, 7)
    model = single_node_model(
        "LayerNorm",
        [("x", onnx_type, [4, 67]), ("weight", onnx_type, [67]), ("bias", onnx_type, [67])],
        {"eps": 1e-5},
        output_type=onnx_type,
    )
    y = torch.empty(4, 67, dtype=dtype)
    _run_bound(model, [x, w, b], [y])
    close(y, ref(x, w, b), dtype)
    torch.testing.assert_close(y, opbridge.layer_norm(x, w, b, _ort_eps(1e-5)), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ort_add_layer_norm_single_node_every_dtype(dtype):
    onnx_type = ONNX_TYPES[dtype]
    x, _, b, _ = _inputs((3, 45), dtype, 8)
    residual = torch.randn(3, 45, dtype=torch.float64).to(dtype)
    model = single_node_model(
        "AddLayerNorm",
        [("x", onnx_type, [3, 45]), ("residual", onnx_type, [3, 45]), ("bias", onnx_type, [45])],
        {"eps": 1e-5},
        node_inputs=["x", "residual", "", "bias"],
        outputs=[("out", onnx_type), ("residual_out", onnx_type)],
    )
    out, total = torch.empty(3, 45, dtype=dtype), torch.empty(3, 45, dtype=dtype)
    _run_bound(model, [x, residual, b], [out, total])
    torch.testing.assert_close(total, x + residual, atol=0, rtol=0)
    close(out, ref(total, None, b), dtype)
    want_out, want_total = opbridge.add_layer_norm(x, residual, None, b, _ort_eps(1e-5))
    torch.testing.assert_close(out, want_out, atol=0, rtol=0)
    torch.testing.assert_close(total, want_total, atol=0, rtol=0)


def test_ort_rejects_a_weight_of_the_wrong_length():
    model = single_node_model(
        "LayerNorm",
        [("x", TensorProto.FLOAT, [2, 8]), ("weight", TensorProto.FLOAT, [7])],
        {"eps": 1e-5},
    )
    with pytest.raises(Exception, match=r"argument 'weight' must be 1-D with 8 elements"):
        run(model, [np.ones((2, 8), np.float32), np.ones(7, np.float32)])


# ---------------------------------------------------------------- nn modules


@pytest.mark.parametrize(
    ("elementwise_affine", "bias"), [(True, True), (True, False), (False, True)]
)
def test_layernorm_module_is_a_drop_in_for_torch(elementwise_affine, bias):
    ours = opbridge.nn.LayerNorm(32, eps=1e-6, elementwise_affine=elementwise_affine, bias=bias)
    theirs = torch.nn.LayerNorm(32, eps=1e-6, elementwise_affine=elementwise_affine, bias=bias)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.normalized_shape == theirs.normalized_shape
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(4, 7, 32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y, y2 = ours(x), theirs(x2)
    torch.testing.assert_close(y, y2, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(y)
    y.backward(grad)
    y2.backward(grad)
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-5)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-5)


def test_layernorm_module_shapes_and_repr():
    norm = opbridge.nn.LayerNorm([8])
    assert norm.normalized_shape == (8,)
    assert torch.equal(norm.weight, torch.ones(8)) and torch.equal(norm.bias, torch.zeros(8))
    assert "elementwise_affine=True" in repr(norm)
    with pytest.raises(ValueError, match=r"last dimension only.*\(4, 8\)"):
        opbridge.nn.LayerNorm((4, 8))


def test_add_layernorm_module_matches_add_then_layernorm():
    ours = opbridge.nn.AddLayerNorm(16)
    theirs = torch.nn.LayerNorm(16)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours.load_state_dict(theirs.state_dict())
    x, r = torch.randn(3, 16), torch.randn(3, 16)
    out, residual = ours(x, r)
    torch.testing.assert_close(residual, x + r)
    torch.testing.assert_close(out, theirs(x + r), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- bad input

BAD_INPUTS = [
    (
        lambda: opbridge.layer_norm(torch.randn(2, 8), torch.ones(7)),
        r"layer_norm.*argument 'weight' must be 1-D with 8 elements .*got shape \[7\]",
    ),
    (
        lambda: opbridge.layer_norm(torch.randn(2, 8), None, torch.ones(2, 4)),
        r"layer_norm.*argument 'bias' must be 1-D with 8 elements .*got shape \[2, 4\]",
    ),
    (
        lambda: opbridge.layer_norm(torch.tensor(1.0)),
        r"layer_norm.*argument 'x' must have at least 1 dimension, got a 0-d tensor",
    ),
    (
        lambda: opbridge.layer_norm(torch.ones(2, 3, dtype=torch.int32)),
        r"layer_norm.*argument 'x' must be float32, float64, float16 or bfloat16, got int32",
    ),
    (
        lambda: opbridge.layer_norm(torch.randn(2, 8), torch.ones(8, dtype=torch.float64)),
        r"argument 'weight' must have the dtype of x \(float32\), got float64",
    ),
    (
        lambda: opbridge.add_layer_norm(torch.randn(2, 8), torch.randn(2, 7)),
        r"add_layer_norm.*argument 'residual' must have the shape of x \[2, 8\], "
        r"got shape \[2, 7\]",
    ),
    (
        lambda: opbridge.add_layer_norm(torch.randn(2, 8), torch.randn(2, 8, dtype=torch.bfloat16)),
        r"add_layer_norm.*argument 'residual' must have the dtype of x \(float32\), got bfloat16",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD_INPUTS)
def test_bad_input_is_named(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_empty_tensors():
    assert opbridge.layer_norm(torch.empty(0, 3)).shape == (0, 3)
    assert opbridge.layer_norm(torch.empty(2, 0), torch.ones(0)).shape == (2, 0)
    w = torch.ones(3, requires_grad=True)
    x = torch.empty(0, 3, requires_grad=True)
    (gw,) = torch.autograd.grad(opbridge.layer_norm(x, w).sum(), (w,))
    assert torch.equal(gw, torch.zeros(3))


# ---------------------------------------------------------------- bias without weight


class _BiasOnly(torch.nn.Module):
    """F.layer_norm(x, shape, None, bias): the one form whose absent optional
    input (weight) is not trailing."""

    def __init__(self, add: bool):
        super().__init__()
        self.add = add

    def forward(self, x, residual, bias):
        if self.add:
            return opbridge.add_layer_norm(x, residual, None, bias)
        return opbridge.layer_norm(x + residual, None, bias)


@pytest.mark.parametrize("add", [False, True], ids=["layer_norm", "add_layer_norm"])
@pytest.mark.parametrize(
    ("route", "dynamo"),
    [("standard", True), ("standard", False), ("ort", True), ("ort", False), ("custom", True)],
)
def test_bias_without_weight_exports(add, route, dynamo):
    g = torch.Generator().manual_seed(9)
    x, r = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    bias = torch.randn(5, generator=g)
    model = _BiasOnly(add).eval()
    proto = opbridge.export.export(model, (x, r, bias), route=route, dynamo=dynamo)
    nodes = {(n.domain, n.op_type) for n in proto.graph.node}
    if route == "custom":
        assert ("opbridge", "AddLayerNorm" if add else "LayerNorm") in nodes
    elif route == "ort" and add:
        assert ("com.microsoft", "SkipLayerNormalization") in nodes
    else:
        assert ("", "LayerNormalization") in nodes
    if route == "custom":
        session = opbridge.runtimes.onnxruntime.InferenceSession(proto)
    else:
        session = ort.InferenceSession(
            proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, dict(zip(names, [x.numpy(), r.numpy(), bias.numpy()], strict=True)))
    want = model(x, r, bias)
    for a, b in zip(got, want if add else (want,), strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_bias_without_weight_is_refused_by_the_legacy_custom_export():
    # The TorchScript exporter's custom node cannot leave out a non-trailing
    # input: the export says so instead of shifting bias into weight's place.
    x = torch.randn(3, 5)
    with pytest.raises(NotImplementedError, match="cannot leave out a non-trailing optional input"):
        opbridge.export.export(
            _BiasOnly(False).eval(), (x, x, torch.randn(5)), route="custom", dynamo=False
        )


# ---------------------------------------------------------------- float64, standard and ort routes


class _Float64Norms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(10)
        self.w = torch.nn.Parameter(1 + 0.1 * torch.randn(24, generator=g, dtype=torch.float64))
        self.b = torch.nn.Parameter(0.1 * torch.randn(24, generator=g, dtype=torch.float64))

    def forward(self, x, r):
        y = opbridge.layer_norm(x, self.w, self.b, eps=1e-3)
        out, total = opbridge.add_layer_norm(y, r, None, None, eps=1e-3)
        return out, total


@pytest.mark.parametrize(
    ("exporter", "opset", "route"),
    [
        ("legacy", 16, "standard"),
        ("legacy", 18, "standard"),
        ("legacy", 18, "ort"),
        ("dynamo", 18, "standard"),
        ("dynamo", 23, "ort"),
    ],
)
@pytest.mark.parametrize("level", ["disable_all", "enable_all"])
def test_float64_is_exact_on_the_standard_and_ort_routes(exporter, opset, route, level):
    # Below opset 17 the chain (with Mul for Pow, which ONNX Runtime does not
    # fuse); from 17 LayerNormalization, which ONNX Runtime runs in float64.
    # The ort route's SkipLayerNormalization is float32 only: float64 takes
    # the standard form.
    model = _Float64Norms().eval()
    g = torch.Generator().manual_seed(11)
    x = torch.randn(5, 24, generator=g, dtype=torch.float64)
    r = torch.randn(5, 24, generator=g, dtype=torch.float64)
    proto = opbridge.export.export(
        model, (x, r), route=route, opset=opset, dynamo=exporter == "dynamo"
    )
    types = {n.op_type for n in proto.graph.node}
    assert ("LayerNormalization" in types) == (opset >= 17), types
    assert "SkipLayerNormalization" not in types
    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "enable_all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, dict(zip(names, [x.numpy(), r.numpy()], strict=True)))
    with torch.no_grad():
        want = model(x, r)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-10)
