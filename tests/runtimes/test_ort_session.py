"""opbridge.runtimes.onnxruntime.InferenceSession: the optimization level by name and the
thread count, on their own or on top of the caller's session options."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto

import opbridge
from opbridge.runtimes.onnxruntime import OPTIMIZATION_LEVELS, available_levels

from ort_helpers import single_node_model


def _model():
    return single_node_model("ScaledClamp", [("x", TensorProto.FLOAT, [3])], {"scale": 2.0})


@pytest.mark.parametrize("level", available_levels())
def test_level_by_name_is_applied(level):
    session = opbridge.runtimes.onnxruntime.InferenceSession(_model(), optimization_level=level)
    applied = session.get_session_options().graph_optimization_level
    assert applied == getattr(onnxruntime.GraphOptimizationLevel, OPTIMIZATION_LEVELS[level])
    assert session.run(None, {"x": np.ones(3, np.float32)})[0].tolist() == [2, 2, 2]


def test_threads_set_intra_op_threads_and_sequential_execution():
    session = opbridge.runtimes.onnxruntime.InferenceSession(_model(), threads=3)
    options = session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 1)
    assert options.execution_mode == onnxruntime.ExecutionMode.ORT_SEQUENTIAL


def test_level_and_threads_go_on_top_of_the_callers_options():
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 5
    session = opbridge.runtimes.onnxruntime.InferenceSession(
        _model(), sess_options=options, optimization_level="disable_all"
    )
    applied = session.get_session_options()
    assert applied.log_severity_level == 3
    assert applied.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    # Left out, the caller's setting stands.
    assert applied.intra_op_num_threads == 5


def test_unknown_level_and_bad_threads_are_named():
    with pytest.raises(
        ValueError, match=r"unknown optimization level 'max'; expected one of"
    ) as info:
        opbridge.runtimes.onnxruntime.InferenceSession(_model(), optimization_level="max")
    assert str(available_levels()) in str(info.value)
    for threads in (0, 1.5, True):
        with pytest.raises(ValueError, match=rf"threads must be an int >= 1 .*got {threads!r}"):
            opbridge.runtimes.onnxruntime.InferenceSession(_model(), threads=threads)
