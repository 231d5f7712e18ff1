"""opbridge.runtimes.onnxruntime.InferenceSession in place of ONNX Runtime's
own class: each way users call ONNX Runtime, run with the stock class and
with the wrapper, must end the same way (the same results, or an exception
of the same ONNX Runtime class), and the caller's SessionOptions must come
out as they went in."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import plain_ort_library
import pytest
from onnx import TensorProto, helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as Stock

import opbridge
from opbridge.runtimes.onnxruntime import InferenceSession as Wrapper
from opbridge.runtimes.onnxruntime import get_library_path

from ort_helpers import single_node_model

X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


def _plain_model() -> onnx.ModelProto:
    node = helper.make_node("Neg", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _opbridge_model() -> onnx.ModelProto:
    model = single_node_model(
        "ScaledClamp",
        [("x", TensorProto.FLOAT, [2, 3])],
        {"scale": 2.0, "min_val": -1.0, "max_val": 1.0},
    )
    # A declared output shape, as onnx's checker (and so onnxruntime.backend) wants.
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]))
    return model


PLAIN = _plain_model().SerializeToString()
OURS = _opbridge_model().SerializeToString()
EXPECTED = {PLAIN: -X, OURS: np.clip(2 * X, -1, 1)}


def _outcome(call):
    """``("ok", value)`` or ``("raised", exception)``."""
    try:
        return "ok", call()
    except Exception as error:  # the outcome compared
        return "raised", error


def _same(stock, ours) -> None:
    """The wrapper ended as the stock class did: equal values, or an
    exception of the stock exception's class."""
    assert stock[0] == ours[0], (stock, ours)
    if stock[0] == "raised":
        assert isinstance(ours[1], type(stock[1])), (type(stock[1]), type(ours[1]), ours[1])
    else:
        np.testing.assert_equal(ours[1], stock[1])


def _options_state(options) -> dict:
    names = (
        "graph_optimization_level",
        "intra_op_num_threads",
        "inter_op_num_threads",
        "execution_mode",
        "enable_profiling",
        "log_severity_level",
        "optimized_model_filepath",
    )
    return {name: getattr(options, name) for name in names}


def _run(session, model=PLAIN):
    (y,) = session.run(None, {"x": X})
    np.testing.assert_allclose(y, EXPECTED[model], rtol=1e-6)
    return y


@pytest.mark.parametrize("session_class", [Stock, Wrapper], ids=["stock", "wrapper"])
def test_one_options_object_serves_many_sessions_and_threads(session_class):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    if session_class is Stock:
        options.register_custom_ops_library(get_library_path())
    before = _options_state(options)
    for model in (PLAIN, OURS, PLAIN, OURS):
        _run(session_class(model, options), model)
    failures = []

    def work():
        try:
            _run(session_class(OURS, options), OURS)
        except Exception as error:  # collected for the assertion
            failures.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert _options_state(options) == before


def test_options_with_the_library_registered_by_the_caller():
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    _run(Wrapper(OURS, options), OURS)
    # The same object still serves the stock class, and the wrapper again.
    _run(Stock(OURS, options), OURS)
    _run(Wrapper(OURS, options), OURS)
    # Registering again, after the wrapper did, adds nothing twice.
    options.register_custom_ops_library(get_library_path())
    _run(Stock(OURS, options), OURS)


def test_a_retry_after_a_failed_session_works():
    options = onnxruntime.SessionOptions()
    broken = _opbridge_model()
    broken.graph.node[0].op_type = "ScaledClam"
    with pytest.raises(Exception) as info:
        Wrapper(broken, options)
    assert "did you mean 'ScaledClamp'?" in str(info.value)
    _run(Wrapper(OURS, options), OURS)
    _run(Wrapper(OURS, options), OURS)


def test_level_and_threads_leave_the_callers_options_as_given():
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 5
    before = _options_state(options)
    session = Wrapper(OURS, options, optimization_level="disable_all", threads=2)
    applied = session.get_session_options()
    assert applied.intra_op_num_threads == 2 and applied.inter_op_num_threads == 1
    assert applied.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert _options_state(options) == before
    assert Wrapper(OURS, options).get_session_options().intra_op_num_threads == 5
    # Threads sharing the options, each with settings of its own.
    applied = []

    def work(threads):
        session = Wrapper(OURS, options, threads=threads)
        applied.append((threads, session.get_session_options().intra_op_num_threads))

    workers = [threading.Thread(target=work, args=(1 + k % 3,)) for k in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(applied) == sorted((k, k) for k, _ in applied) and len(applied) == 8
    assert _options_state(options) == before


@pytest.mark.parametrize(
    "model",
    [
        "missing.onnx",
        b"not a model at all",
        PLAIN[: len(PLAIN) // 2],
    ],
    ids=["missing-file", "garbage-bytes", "truncated-bytes"],
)
def test_unreadable_models_raise_onnx_runtimes_classes(model, tmp_path):
    if isinstance(model, str):
        model = str(tmp_path / model)
    stock = _outcome(lambda: Stock(model))
    ours = _outcome(lambda: Wrapper(model))
    assert stock[0] == "raised"
    _same(stock, ours)


def test_a_missing_file_is_onnx_runtimes_no_such_file(tmp_path):
    with pytest.raises(ort_errors.NoSuchFile):
        Wrapper(str(tmp_path / "missing.onnx"))


def test_an_unknown_domain_is_left_to_onnx_runtime_and_explained():
    model = single_node_model(
        "Foo", [("x", TensorProto.FLOAT, [2, 3])], {}, domain="com.example.nowhere"
    )
    stock = _outcome(lambda: Stock(model.SerializeToString()))
    ours = _outcome(lambda: Wrapper(model))
    _same(stock, ours)
    message = str(ours[1])
    assert "no loaded operator library provides" in message
    assert isinstance(ours[1], RuntimeError)  # and opbridge's own class, as before
    assert isinstance(ours[1].__cause__, type(stock[1]))


@pytest.mark.parametrize("model", [PLAIN, OURS], ids=["plain", "opbridge"])
def test_ort_format_models_load(model, tmp_path):
    path = tmp_path / "model.ort"
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(path)
    options.add_session_config_entry("session.save_model_format", "ORT")
    Wrapper(model, options)
    assert path.is_file()
    _run(Wrapper(str(path)), model)
    if model is PLAIN:
        _run(Stock(str(path)), model)


def test_a_model_saved_by_onnx_runtime_reads_back(tmp_path):
    path = tmp_path / "saved.onnx"
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(path)
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    Wrapper(OURS, options)
    saved = onnx.load(path)
    for opset in saved.opset_import:
        if opset.domain == "opbridge":
            opset.version = 1000  # what ONNX Runtime writes for a custom domain it saves
    _run(Wrapper(saved), OURS)


def test_the_callers_providers_and_policy_are_kept():
    options = onnxruntime.SessionOptions()
    options.set_provider_selection_policy(onnxruntime.OrtExecutionProviderDevicePolicy.PREFER_CPU)
    stock = Stock(PLAIN, options)
    ours = Wrapper(PLAIN, options)
    assert ours.get_providers() == stock.get_providers()
    assert Wrapper(PLAIN).get_providers() == Stock(PLAIN).get_providers()
    assert Wrapper(PLAIN, providers=["CPUExecutionProvider"]).get_providers() == [
        "CPUExecutionProvider"
    ]


def test_profiling_and_session_options_read_back(tmp_path):
    for session_class in (Stock, Wrapper):
        options = onnxruntime.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(tmp_path / session_class.__name__)
        session = session_class(PLAIN, options)
        _run(session)
        assert Path(session.end_profiling()).is_file()
        assert session.get_session_options().enable_profiling


def test_it_is_onnx_runtimes_class(monkeypatch):
    session = Wrapper(OURS)
    assert isinstance(session, onnxruntime.InferenceSession)

    class Mine(Wrapper):
        pass

    _run(Mine(OURS), OURS)
    # The literal assignment: every onnxruntime.InferenceSession(...) is the
    # wrapper, which still builds on ONNX Runtime's own class.
    monkeypatch.setattr(onnxruntime, "InferenceSession", Wrapper)
    _run(onnxruntime.InferenceSession(OURS), OURS)
    import onnxruntime.backend as backend

    # onnxruntime.backend takes a session it is given by isinstance.
    prepared = backend.prepare(Wrapper(OURS))
    np.testing.assert_allclose(prepared.run(X)[0], EXPECTED[OURS])
    prepared = backend.prepare(onnx.load_from_string(PLAIN))
    np.testing.assert_allclose(prepared.run(X)[0], EXPECTED[PLAIN])


def test_the_wrapper_is_the_documented_name():
    assert opbridge.runtimes.onnxruntime.InferenceSession is Wrapper
    assert issubclass(Wrapper, Stock) and Wrapper.__module__ == "opbridge.runtimes.onnxruntime"


@pytest.fixture(scope="module")
def plain_library(tmp_path_factory) -> str:
    """A user's own ONNX Runtime custom-op library (test.plain::Negate),
    written against ONNX Runtime's C API alone."""
    return str(plain_ort_library.build(tmp_path_factory.mktemp("plain-ort")))


def test_a_library_the_caller_registered_serves_its_domain(plain_library):
    negate = plain_ort_library.negate_model().SerializeToString()
    mixed = plain_ort_library.mixed_model().SerializeToString()
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(plain_library)
    for session_class in (Stock, Wrapper, Stock, Wrapper):
        (y,) = session_class(negate, options).run(None, {"x": x})
        np.testing.assert_array_equal(y, -x)
    # The caller's library and opbridge's side by side, in one options object.
    for _ in range(2):
        (y,) = Wrapper(mixed, options).run(None, {"x": x})
        np.testing.assert_array_equal(y, np.clip(-2 * x, -10, 10))
    _run(Stock(OURS, options), OURS)  # opbridge's library stays registered once


def test_onnx_runtimes_own_failure_keeps_its_message(plain_library):
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(plain_library)
    options.register_custom_ops_library(plain_library)  # twice: ONNX Runtime refuses it
    negate = plain_ort_library.negate_model().SerializeToString()
    stock = _outcome(lambda: Stock(negate, options))
    ours = _outcome(lambda: Wrapper(negate, options))
    _same(stock, ours)
    assert str(ours[1]) == str(stock[1])
    assert "Domain already set in registry" in str(ours[1])
