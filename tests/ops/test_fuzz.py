"""Property-based fuzzing of the ONNX Runtime kernels and the PyTorch ops:
random shapes, dtypes, attribute values and argument mismatches. Every case
must either match the reference or fail with a message naming the op and
the argument; a crash takes the test process down and fails the run.

OPBRIDGE_FUZZ_EXAMPLES raises the number of cases (default 40 per property;
CI runs the default, derandomized so a failure reproduces)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

import opbridge

from op_cases import OPS
from ort_helpers import run, single_node_model

EXAMPLES = int(os.environ.get("OPBRIDGE_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
DTYPES = {
    "float32": (np.float32, TensorProto.FLOAT),
    "float64": (np.float64, TensorProto.DOUBLE),
    "int32": (np.int32, TensorProto.INT32),
}
shapes = st.lists(st.integers(0, 9), min_size=0, max_size=4)
finite_or_odd = st.one_of(
    st.floats(-10, 10, allow_nan=False, width=32),
    st.sampled_from([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, 1e30]),
)


def _array(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return np.asarray(rng.standard_normal(shape) * 3, dtype=DTYPES[dtype][0])


def _expect_error_or_match(call, reference):
    try:
        expected = reference()
    except Exception:
        expected = None
    try:
        got = call()
    except Exception as error:
        message = str(error)
        assert "opbridge" in message and ("argument" in message or "attribute" in message), message
        return
    assert expected is not None, "opbridge accepted input that the reference rejects"
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)


@FUZZ
@given(
    shape=shapes,
    dtype=st.sampled_from(list(DTYPES)),
    scale=finite_or_odd,
    lo=finite_or_odd,
    hi=finite_or_odd,
    seed=st.integers(0, 1000),
)
def test_fuzz_scaled_clamp_in_onnx_runtime(shape, dtype, scale, lo, hi, seed):
    x = _array(shape, dtype, seed)
    model = single_node_model(
        "ScaledClamp",
        [("x", DTYPES[dtype][1], list(shape))],
        {"scale": scale, "min_val": lo, "max_val": hi},
        output_type=DTYPES[dtype][1],
    )

    def reference():
        if dtype == "int32":
            raise TypeError("integer input")
        t = torch.from_numpy(x)
        return (
            OPS["scaled_clamp"]
            .reference(t, np.float32(scale).item(), np.float32(lo).item(), np.float32(hi).item())
            .numpy()
        )

    _expect_error_or_match(lambda: run(model, [x])[0], reference)


@FUZZ
@given(
    x_shape=shapes,
    weight_len=st.integers(0, 9),
    bias=st.sampled_from([None, "match", "wrong"]),
    dtype=st.sampled_from(list(DTYPES)),
    weight_dtype=st.sampled_from(["same", "float64"]),
    eps=st.sampled_from([1e-6, 1e-3, 0.0, 1.0]),
    seed=st.integers(0, 1000),
)
def test_fuzz_rms_norm_in_onnx_runtime(x_shape, weight_len, bias, dtype, weight_dtype, eps, seed):
    x = _array(x_shape, dtype, seed)
    wdtype = dtype if weight_dtype == "same" else "float64"
    w = _array([weight_len], wdtype, seed + 1)
    inputs = [("x", DTYPES[dtype][1], list(x_shape)), ("w", DTYPES[wdtype][1], [weight_len])]
    feeds = [x, w]
    if bias is not None:
        b_len = weight_len if bias == "match" else weight_len + 1
        feeds.append(_array([b_len], wdtype, seed + 2))
        inputs.append(("b", DTYPES[wdtype][1], [b_len]))
    model = single_node_model("RmsNorm", inputs, {"eps": eps}, output_type=DTYPES[dtype][1])

    def reference():
        if dtype == "int32" or wdtype != dtype or not x_shape or x_shape[-1] != weight_len:
            raise ValueError("invalid")
        if bias == "wrong":
            raise ValueError("invalid bias")
        tensors = [torch.from_numpy(a) for a in feeds]
        return OPS["rms_norm"].reference(*tensors, eps=float(np.float32(eps))).numpy()

    if not x_shape and wdtype != dtype:
        # ONNX Runtime's C API shows a 0-d input like one of unknown rank, so
        # the library cannot type the output; ONNX Runtime's own inference
        # then refuses the mixed dtypes with a message naming the node only.
        with pytest.raises(Exception, match=r"Type Error: .* of node \(node0\)"):
            run(model, feeds)
        return
    _expect_error_or_match(lambda: run(model, feeds)[0], reference)


@FUZZ
@given(
    x_shape=shapes,
    weight_len=st.integers(0, 9),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.int64]),
    eps=st.sampled_from([1e-6, 0.5]),
    seed=st.integers(0, 1000),
)
def test_fuzz_rms_norm_in_torch(x_shape, weight_len, dtype, eps, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(x_shape, generator=g) * 3).to(dtype)
    w = torch.randn(weight_len, generator=g).to(dtype)

    def reference():
        if dtype == torch.int64 or not x_shape or x_shape[-1] != weight_len:
            raise ValueError("invalid")
        return OPS["rms_norm"].reference(x, w, eps=eps).numpy()

    _expect_error_or_match(lambda: opbridge.rms_norm(x, w, eps=eps).numpy(), reference)


@pytest.mark.parametrize("name", ["ScaledClamp", "RmsNorm"])
def test_fuzz_attribute_of_every_onnx_type(name):
    # Each wrong attribute type must be refused at load, naming op and attribute.
    from onnx import helper

    from ort_helpers import session

    for value in (
        1,
        "text",
        [1.0, 2.0],
        [1, 2],
        helper.make_tensor("t", TensorProto.FLOAT, [1], [1.0]),
    ):
        attr = "eps" if name == "RmsNorm" else "scale"
        inputs = [("x", TensorProto.FLOAT, [2, 3])]
        if name == "RmsNorm":
            inputs.append(("w", TensorProto.FLOAT, [3]))
        model = single_node_model(name, inputs, {attr: value})
        with pytest.raises(
            Exception, match=rf"opbridge::{name} .*attribute '{attr}' must be present"
        ):
            session(model)
