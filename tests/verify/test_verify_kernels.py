"""Kernel or body: on the ``function`` route each library node has a
model-local function (its fallback body); with the library loaded the
runtime must run the library's kernel, and verify says, for every such node
and the call it belongs to, which one ran (by the runtime's own profiling).
A node that ran its body instead fails the report, naming the node."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import faulty_library
import pytest
import torch

import opbridge
from opbridge.verify import BODY, KERNEL


class TwoNorms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = opbridge.nn.RMSNorm(16)
        self.proj = torch.nn.Linear(16, 16)
        self.b = opbridge.nn.RMSNorm(16)

    def forward(self, x):
        return self.b(self.proj(self.a(x)))


ARGS = (torch.randn(3, 5, 16),)
ONE_LEVEL = {"levels": ["enable_all"], "batch_sizes": [3], "draws": 1}


def test_verify_says_that_each_library_node_ran_its_kernel():
    report = opbridge.verify(TwoNorms().eval(), ARGS, route="function", **ONE_LEVEL)
    assert report.passed, report
    assert [(k.op, k.call, k.ran, k.status) for k in report.kernels] == [
        ("opbridge::rms_norm", 1, KERNEL, "pass"),
        ("opbridge::rms_norm", 2, KERNEL, "pass"),
    ], report.kernels
    assert report.kernel_check.startswith("2 of 2 library nodes with a fallback body ran"), (
        report.kernel_check
    )
    assert "ONNX Runtime's profiling" in report.kernel_check
    # Per call of the operator too, and in the table and the JSON.
    assert [r.ran for r in report.operators] == [KERNEL, KERNEL], report.operators
    assert "Library kernels (nodes with a fallback body)" in str(report)
    assert json.loads(report.to_json())["kernels"][0]["ran"] == KERNEL


def test_verify_fails_when_the_runtime_ran_a_body_instead_of_the_kernel(monkeypatch):
    # The library is loaded, but the sessions do not get it registered: the
    # runtime runs each node's fallback body, whose numbers agree.
    monkeypatch.setattr(opbridge.runtimes.model, "needed_libraries", lambda proto: [])
    report = opbridge.verify(TwoNorms().eval(), ARGS, route="function", **ONE_LEVEL)
    assert not report.passed
    assert [k.ran for k in report.kernels] == [BODY, BODY]
    assert [r.ran for r in report.operators] == [BODY, BODY]
    [line] = [f for f in report.failures() if f.startswith("kernels:")]
    first = report.kernels[0]
    assert "2 of 2 library nodes ran their model-local function's body" in line, line
    assert f"opbridge::rms_norm call 1 (node {first.node!r}, opbridge::RmsNorm)" in line, line
    # The bodies' check no longer calls the runtime's session "the kernels".
    bodies = next(c for c in report.structure if c.name.startswith("function bodies"))
    assert "which ran bodies, not kernels" in bodies.detail


def test_a_custom_route_model_has_no_body_to_check():
    report = opbridge.verify(TwoNorms().eval(), ARGS, route="custom", **ONE_LEVEL)
    assert report.passed and report.kernels == [] and report.kernel_check == ""


def test_sessions_of_a_session_factory_are_not_claimed_either_way():
    def factory(model_bytes, level):
        return opbridge.runtimes.onnxruntime.InferenceSession(model_bytes, optimization_level=level)

    report = opbridge.verify(
        TwoNorms().eval(), ARGS, route="function", session_factory=factory, **ONE_LEVEL
    )
    assert report.passed, report
    assert report.kernel_check.startswith("not run: the sessions come from session_factory")
    assert {k.ran for k in report.kernels} == {"unknown"}


USER_OP = """
import json, sys
import torch
import opbridge
from opbridge.runtimes import onnxruntime as ort_runtime

opbridge.load_library(sys.argv[1])
# The function route's body: the identity, as the kernel computes.
"""
USER_OP += faulty_library.register_card_code('b.op("Identity", x)')
USER_OP += """


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.ops.faulty_ops.short_gradient(self.proj(x))
        return torch.ops.faulty_ops.short_gradient(y * 2.0)


args = (torch.randn(4, 8),)


def summary(report):
    return {
        "passed": report.passed,
        "kernels": [[k.op, k.call, k.node, k.onnx_op, k.ran] for k in report.kernels],
        "calls": [r.ran for r in report.operators],
        "failures": report.failures(),
    }


results = {}
for runtime in ("onnxruntime", "openvino"):
    report = opbridge.verify(Model().eval(), args, route="function", runtime=runtime)
    results[runtime] = summary(report)
# Loaded, but not registered for ONNX Runtime's sessions: the bodies run.
opbridge.runtimes.model.needed_libraries = lambda proto: [opbridge.libraries()[0]]
report = opbridge.verify(Model().eval(), args, route="function", layers=False)
results["not registered"] = summary(report)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def user_op():
    """Verify of a function-route model of a user's op (faulty_ops'
    ShortGradient), in a process of its own: in ONNX Runtime and OpenVINO,
    and in ONNX Runtime with the library loaded but not registered."""
    faulty = faulty_library.build()
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(USER_OP), str(faulty)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_verify_of_a_user_op_says_its_kernel_ran(user_op, runtime):
    found = user_op[runtime]
    assert found["passed"], found["failures"]
    op, onnx_op = "faulty_ops::short_gradient", "com.example.faulty::ShortGradient"
    assert [(k[0], k[1], k[3], k[4]) for k in found["kernels"]] == [
        (op, 1, onnx_op, KERNEL),
        (op, 2, onnx_op, KERNEL),
    ], found
    assert found["calls"] == [KERNEL, KERNEL], found


def test_verify_of_a_user_op_fails_when_its_kernel_did_not_run(user_op):
    found = user_op["not registered"]
    assert not found["passed"]
    assert [k[4] for k in found["kernels"]] == [BODY, BODY], found
    [line] = [f for f in found["failures"] if f.startswith("kernels:")]
    node = found["kernels"][0][2]
    assert f"faulty_ops::short_gradient call 1 (node {node!r}" in line, line
    assert "com.example.faulty::ShortGradient" in line and "onnxruntime" in line, line
