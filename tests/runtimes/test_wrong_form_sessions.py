"""A session of a runtime meets a model with a form the runtime computes
wrong (``Runtime.wrong_forms``): it warns (``WrongFormWarning``), naming the
node, what is wrong and how to export without the form, or refuses it
(``WrongFormError``) where the form's known error is large, unless given
``allow_wrong_forms=True``; verify reports such a model instead."""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import opbridge
from opbridge import runtimes
from opbridge.ops import card
from opbridge.runtimes import WrongForm, WrongFormError, WrongFormWarning
from opbridge.runtimes import openvino as openvino_runtime
from opbridge.sdk.testing import export_sample

from ort_helpers import single_node_model

FLOAT = TensorProto.FLOAT
BATCH, SEQ, HEADS, HEAD = 2, 5, 3, 8


def contrib_rotary_node(name: str = "rotary_q") -> onnx.NodeProto:
    """com.microsoft RotaryEmbedding with the start offset (position_ids of
    shape [1]), the form the ort route emits for a shared cos/sin table."""
    return helper.make_node(
        "RotaryEmbedding",
        ["x", "pos", "cos", "sin"],
        ["y"],
        name=name,
        domain="com.microsoft",
        interleaved=0,
        num_heads=HEADS,
        rotary_embedding_dim=HEAD,
        scale=1.0,
    )


def rotary_inputs() -> list[onnx.ValueInfoProto]:
    return [
        helper.make_tensor_value_info("x", FLOAT, [BATCH, SEQ, HEADS * HEAD]),
        helper.make_tensor_value_info("pos", TensorProto.INT64, [1]),
        helper.make_tensor_value_info("cos", FLOAT, [SEQ, HEAD // 2]),
        helper.make_tensor_value_info("sin", FLOAT, [SEQ, HEAD // 2]),
    ]


def make_model(nodes, inputs, outputs, functions=(), extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "wrong_form", inputs, outputs)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(
        graph,
        opset_imports=[*opsets, *extra_opsets],
        functions=list(functions),
        ir_version=10,
    )


def contrib_rotary_model() -> tuple[onnx.ModelProto, dict]:
    out = helper.make_tensor_value_info("y", FLOAT, [BATCH, SEQ, HEADS * HEAD])
    model = make_model([contrib_rotary_node()], rotary_inputs(), [out])
    rng = np.random.default_rng(0)
    angles = rng.random((SEQ, HEAD // 2)).astype(np.float32) * 6
    feeds = {
        "x": rng.standard_normal((BATCH, SEQ, HEADS * HEAD)).astype(np.float32),
        "pos": np.array([0], np.int64),
        "cos": np.cos(angles),
        "sin": np.sin(angles),
    }
    return model, feeds


def onnx_rotary_model() -> tuple[onnx.ModelProto, dict]:
    """ai.onnx RotaryEmbedding (opset 23) alone: OpenVINO lists it (wrong on
    the query of an attention block), with an error below LARGE_ERROR."""
    node = helper.make_node(
        "RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="rotary_k", num_heads=HEADS
    )
    graph = helper.make_graph(
        [node],
        "onnx_rotary",
        [
            helper.make_tensor_value_info("x", FLOAT, [BATCH, SEQ, HEADS * HEAD]),
            helper.make_tensor_value_info("cos", FLOAT, [SEQ, HEAD // 2]),
            helper.make_tensor_value_info("sin", FLOAT, [SEQ, HEAD // 2]),
            helper.make_tensor_value_info("pos", TensorProto.INT64, [BATCH, SEQ]),
        ],
        [helper.make_tensor_value_info("y", FLOAT, [BATCH, SEQ, HEADS * HEAD])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    rng = np.random.default_rng(1)
    angles = rng.random((SEQ, HEAD // 2)).astype(np.float32) * 6
    feeds = {
        "x": rng.standard_normal((BATCH, SEQ, HEADS * HEAD)).astype(np.float32),
        "cos": np.cos(angles),
        "sin": np.sin(angles),
        "pos": np.tile(np.arange(SEQ, dtype=np.int64), (BATCH, 1)),
    }
    return model, feeds


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def wrong_form_warnings(caught) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, WrongFormWarning)]


# ------------------------------------------------- the forms and their uses


def test_openvinos_forms_say_which_is_refused():
    forms = runtimes.get("openvino").wrong_forms
    assert forms["com.microsoft::RotaryEmbedding"].large
    assert forms["RotaryEmbedding"].max_abs_err is not None
    assert not forms["RotaryEmbedding"].large
    assert runtimes.get("onnxruntime").wrong_forms == {}


def test_a_form_given_by_its_why_alone_is_warned_of_not_refused():
    picky = dataclasses.replace(runtimes.get("onnxruntime"), wrong_forms={"Relu": "too eager"})
    assert picky.wrong_forms == {"Relu": WrongForm("too eager")}
    assert not picky.wrong_forms["Relu"].large
    assert str(picky.wrong_forms["Relu"]) == "too eager"


def test_uses_are_found_in_the_graph_subgraphs_and_function_bodies():
    out = helper.make_tensor_value_info("y", FLOAT, None)
    then_branch = helper.make_graph([contrib_rotary_node("in_then")], "then", [], [out])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="plain")], "else", [], [out]
    )
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    branch = helper.make_node(
        "If", ["cond"], ["y"], name="choose", then_branch=then_branch, else_branch=else_branch
    )
    function = helper.make_function(
        "local.fns",
        "Rotate",
        ["x", "pos", "cos", "sin"],
        ["y"],
        [contrib_rotary_node("in_body")],
        [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
    )
    call = helper.make_node("Rotate", ["x", "pos", "cos", "sin"], ["z"], domain="local.fns")
    model = make_model(
        [branch, call, contrib_rotary_node("in_graph")],
        [*rotary_inputs(), cond],
        [out],
        functions=[function],
        extra_opsets=[helper.make_opsetid("local.fns", 1)],
    )
    uses = runtimes.get("openvino").wrong_form_uses(model)
    assert [(u.node, u.where) for u in uses] == [
        ("in_then", "a subgraph of node 'choose'"),
        ("in_graph", "the graph"),
        ("in_body", "function local.fns::Rotate"),
    ]
    assert {u.form for u in uses} == {"com.microsoft::RotaryEmbedding"}
    assert (
        uses[0].label()
        == "node 'in_then' (com.microsoft::RotaryEmbedding, in a subgraph of node 'choose')"
    )


# ------------------------------------------------------------------ OpenVINO

needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None, reason="OpenVINO is not installed"
)
needs_extension = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None
    or not opbridge.libraries()[0].adapter_path("openvino").is_file(),
    reason="OpenVINO or libopbridge_openvino.so is missing",
)


@needs_openvino
def test_compile_model_refuses_a_large_wrong_form_naming_the_node():
    model, _ = contrib_rotary_model()
    with pytest.raises(WrongFormError) as raised:
        openvino_runtime.compile_model(model)
    message = str(raised.value)
    assert "node 'rotary_q' (com.microsoft::RotaryEmbedding, in the graph)" in message
    assert "start-offset position_ids" in message  # why it is wrong there
    assert "known max abs error 5.6" in message
    assert "Expected a model without {'com.microsoft::RotaryEmbedding'}" in message
    assert "`opbridge export MODEL OUT --route ROUTE --runtime openvino`" in message
    assert "avoid={'com.microsoft::RotaryEmbedding'}" in message
    assert "allow_wrong_forms=True" in message


@needs_openvino
def test_read_model_then_compile_refuses_it_too():
    model, _ = contrib_rotary_model()
    with pytest.raises(WrongFormError, match="rotary_q"):
        openvino_runtime.read_model(model)
    with pytest.raises(WrongFormError, match="rotary_q"):
        runtimes.get("openvino").session(model.SerializeToString())


@needs_openvino
def test_allow_wrong_forms_compiles_it_as_given_and_the_error_is_there():
    model, feeds = contrib_rotary_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = openvino_runtime.compile_model(model, allow_wrong_forms=True)
        read = openvino_runtime.read_model(model, allow_wrong_forms=True)
        openvino_runtime.compile_model(read)  # an openvino.Model: already read
    assert not wrong_form_warnings(caught)
    got = compiled(feeds)[compiled.outputs[0]]
    (want,) = ort_run(model, feeds)
    assert float(np.abs(got - want).max()) > 1.0  # why it is refused


@needs_openvino
def test_a_function_body_with_the_form_is_refused_naming_the_function():
    out = helper.make_tensor_value_info("z", FLOAT, [BATCH, SEQ, HEADS * HEAD])
    function = helper.make_function(
        "local.fns",
        "Rotate",
        ["x", "pos", "cos", "sin"],
        ["y"],
        [contrib_rotary_node("in_body")],
        [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
    )
    call = helper.make_node(
        "Rotate", ["x", "pos", "cos", "sin"], ["z"], name="call", domain="local.fns"
    )
    model = make_model(
        [call],
        rotary_inputs(),
        [out],
        functions=[function],
        extra_opsets=[helper.make_opsetid("local.fns", 1)],
    )
    with pytest.raises(
        WrongFormError,
        match=r"node 'in_body' \(com.microsoft::RotaryEmbedding, in function local.fns::Rotate\)",
    ):
        openvino_runtime.compile_model(model)


@needs_openvino
def test_compile_model_warns_of_a_form_wrong_in_some_uses():
    model, feeds = onnx_rotary_model()
    with pytest.warns(WrongFormWarning) as caught:
        compiled = openvino_runtime.compile_model(model)
    (warning,) = wrong_form_warnings(caught)
    message = str(warning.message)
    assert "node 'rotary_k' (RotaryEmbedding, in the graph)" in message
    assert "wrong on the query of an attention block" in message
    assert "--runtime openvino" in message and "avoid={'RotaryEmbedding'}" in message
    assert warning.filename == __file__  # the caller's line, not opbridge's
    # Alone, it computes right: a warning, not a refusal.
    (want,) = ort_run(model, feeds)
    assert float(np.abs(compiled(feeds)[compiled.outputs[0]] - want).max()) < 1e-5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        openvino_runtime.compile_model(model, allow_wrong_forms=True)
    assert not wrong_form_warnings(caught)


@needs_extension
def test_a_model_without_a_wrong_form_compiles_without_a_warning():
    model = single_node_model("RmsNorm", [("x", FLOAT, [2, 8]), ("weight", FLOAT, [8])], {})
    with warnings.catch_warnings():
        warnings.simplefilter("error", WrongFormWarning)
        openvino_runtime.compile_model(model)
        openvino_runtime.read_model(model)


@needs_extension
def test_verify_reports_a_model_with_a_refused_form_without_refusing_or_warning():
    """An ort-route export whose rotary is com.microsoft RotaryEmbedding,
    verified as given in OpenVINO: verify's sessions run it (no refusal, no
    warning: its check is the report's), and the report says what is wrong."""
    rotary = card("rotary_embedding")
    sample = next(
        s for s in rotary.samples(torch.float32, large=False) if s.label.startswith("typ")
    )
    proto, module, inputs = export_sample(rotary, sample, route="ort")
    nodes = [n for n in proto.graph.node if n.domain == "com.microsoft"]
    assert [n.op_type for n in nodes] == ["RotaryEmbedding"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = opbridge.verify(module, inputs, onnx_model=proto, runtime="openvino", draws=1)
    assert not wrong_form_warnings(caught)
    assert report.cells and not report.errors, report.errors
    check = next(c for c in report.structure if c.name.startswith("no operator"))
    assert check.status == "warn"
    assert "com.microsoft::RotaryEmbedding: a start-offset position_ids" in check.detail
    assert repr(nodes[0].name).strip("'") in check.detail
    # The numbers verify compared are the wrong ones the session refuses.
    assert not report.passed and report.max_abs_err > 1e-3


# -------------------------------------------------------------- ONNX Runtime


def test_the_ort_session_acts_on_its_runtimes_forms(monkeypatch):
    """ONNX Runtime lists none; a runtime module whose list has one makes
    opbridge.runtimes.onnxruntime.InferenceSession warn, and refuse a large one."""
    from opbridge.runtimes import onnxruntime as ort_runtime

    model = single_node_model("RmsNorm", [("x", FLOAT, [2, 8]), ("weight", FLOAT, [8])], {})
    model.graph.node[0].name = "norm"
    with warnings.catch_warnings():
        warnings.simplefilter("error", WrongFormWarning)
        opbridge.runtimes.onnxruntime.InferenceSession(model)

    forms = {"opbridge::RmsNorm": WrongForm("wrong somewhere", max_abs_err=0.5)}
    monkeypatch.setattr(
        ort_runtime, "RUNTIME", dataclasses.replace(ort_runtime.RUNTIME, wrong_forms=forms)
    )
    with pytest.warns(WrongFormWarning, match=r"node 'norm' \(opbridge::RmsNorm, in the graph\)"):
        opbridge.runtimes.onnxruntime.InferenceSession(model)
    forms["opbridge::RmsNorm"] = WrongForm("wrong everywhere", max_abs_err=2.0)
    monkeypatch.setattr(
        ort_runtime, "RUNTIME", dataclasses.replace(ort_runtime.RUNTIME, wrong_forms=forms)
    )
    with pytest.raises(WrongFormError, match="--runtime onnxruntime"):
        ort_runtime._session(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WrongFormWarning)
        opbridge.runtimes.onnxruntime.InferenceSession(model, allow_wrong_forms=True)
        with runtimes.reporting_wrong_forms():
            opbridge.runtimes.onnxruntime.InferenceSession(model)
