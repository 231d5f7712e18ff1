"""Failures that used to surface as another layer's message (ONNX Runtime,
protobuf, Python) get an opbridge message that says what to change."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto

import opbridge
from opbridge.verify import compare

from ort_helpers import single_node_model


def _scaled_clamp(**kwargs):
    return single_node_model(
        "ScaledClamp", [("x", TensorProto.FLOAT, [3])], {"scale": 2.0}, **kwargs
    )


def test_newer_ir_version_says_what_to_set():
    import onnxruntime

    model = _scaled_clamp()
    model.ir_version = 14  # what onnx.helper.make_model writes with onnx 1.23
    with pytest.raises(RuntimeError) as info:
        opbridge.ort.InferenceSession(model)
    message = str(info.value)
    assert "has ONNX IR version 14" in message
    assert f"onnxruntime {onnxruntime.__version__} reads up to IR version" in message
    assert "model.ir_version = " in message and "ir_version=" in message
    # The value it names loads.
    supported = int(message.split("reads up to IR version ")[1].split(".")[0])
    model.ir_version = supported
    sess = opbridge.ort.InferenceSession(model)
    assert sess.run(None, {"x": np.ones(3, np.float32)})[0].tolist() == [2, 2, 2]


def test_truncated_file_names_the_path(tmp_path):
    path = tmp_path / "model.onnx"
    data = _scaled_clamp().SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="is not a readable ONNX model") as info:
        opbridge.ort.InferenceSession(path)
    assert str(path) in str(info.value) and f"({len(data) // 2} bytes)" in str(info.value)
    with pytest.raises(ValueError, match="is not a readable ONNX model") as info:
        opbridge.verify(torch.nn.Identity(), (torch.ones(3),), onnx_model=path)
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match="bytes given are not a readable ONNX model"):
        opbridge.ort.InferenceSession(data[: len(data) // 2])


def test_opbridge_domain_version_zero_is_named():
    model = _scaled_clamp(domain_version=0)
    with pytest.raises(
        RuntimeError, match=r"imports ONNX domain 'opbridge' version 0, .* start at 1"
    ):
        opbridge.ort.InferenceSession(model)


@pytest.mark.parametrize("model", ["str", None, 3])
def test_patch_and_unpatch_name_a_non_module(model):
    with pytest.raises(TypeError, match=r"opbridge.patch: model must be a torch.nn.Module, got"):
        opbridge.patch(model)
    with pytest.raises(TypeError, match=r"opbridge.unpatch: model must be a torch.nn.Module"):
        opbridge.unpatch(model)


def test_patch_names_a_rule_that_is_not_callable():
    with pytest.raises(TypeError, match=r"rules\[1\] must be callable .* got str"):
        opbridge.patch(torch.nn.Sequential(torch.nn.ReLU()), rules=[lambda *a: None, "rms"])


class Clamp(torch.nn.Module):
    def forward(self, x):
        return opbridge.scaled_clamp(x, 2.0, -1.0, 1.0)


@pytest.mark.parametrize(
    ("name", "value"), [("rtol", -1e-5), ("atol", -1.0), ("atol", float("nan"))]
)
def test_verify_refuses_a_negative_tolerance(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be a number >= 0"):
        opbridge.verify(Clamp(), (torch.ones(2, 3),), route="custom", **{name: value})


def test_verify_fails_when_nothing_was_compared():
    x = torch.full((2, 3), float("nan"))
    report = opbridge.verify(Clamp().eval(), (x,), route="custom", draws=1, layers=False)
    assert not report.passed
    assert any("nothing compared" in line for line in report.failures()), report.failures()
    # NaN on both sides is not a difference between optimization levels.
    assert report.fusion_problems == []


def test_compare_reports_nothing_compared():
    both_nan = compare("y", np.full(4, np.nan), np.full(4, np.nan), 1e-5, 1e-5)
    assert not both_nan.passed and both_nan.compared == 0
    assert "nothing compared: all 4 elements" in both_nan.detail
    some_nan = compare("y", np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), 1e-5, 1e-5)
    assert some_nan.passed and some_nan.compared == 1
    empty = compare("y", np.zeros((0, 3)), np.zeros((0, 3)), 1e-5, 1e-5)
    assert empty.passed
