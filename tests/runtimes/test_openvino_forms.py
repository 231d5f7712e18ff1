"""The ONNX forms OpenVINO computes wrong, reduced to the smallest model
that shows each (float32, ``INFERENCE_PRECISION_HINT=f32``, against ONNX
Runtime on the same file), and what opbridge does about them: OpenVINO's
runtime lists them in ``wrong_forms``, so an export for it avoids them.

Each reproducer asserts that OpenVINO still differs: when a release fixes
one, its test fails, and the entry can go from ``wrong_forms``."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import opbridge
from opbridge import runtimes
from opbridge.bench.models import build_cases

ov = pytest.importorskip("openvino")


def openvino_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(model.SerializeToString(), b""),
        "CPU",
        {"INFERENCE_PRECISION_HINT": "f32"},
    )
    results = compiled(feeds)
    return [results[output] for output in compiled.outputs]


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def worst(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def contrib_rotary(batch, seq, heads, head, rotary, interleaved, positions):
    node = helper.make_node(
        "RotaryEmbedding",
        ["x", "pos", "cos", "sin"],
        ["y"],
        domain="com.microsoft",
        interleaved=interleaved,
        num_heads=heads,
        rotary_embedding_dim=rotary,
        scale=1.0,
    )
    width = heads * head
    graph = helper.make_graph(
        [node],
        "rotary",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, width]),
            helper.make_tensor_value_info("pos", TensorProto.INT64, list(positions.shape)),
            helper.make_tensor_value_info("cos", TensorProto.FLOAT, [None, rotary // 2]),
            helper.make_tensor_value_info("sin", TensorProto.FLOAT, [None, rotary // 2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, width])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
        ir_version=10,
    )
    rng = np.random.default_rng(0)
    rows = int(positions.max()) + seq
    angles = rng.random((rows, rotary // 2)).astype(np.float32) * 6
    feeds = {
        "x": rng.standard_normal((batch, seq, width)).astype(np.float32),
        "pos": positions,
        "cos": np.cos(angles),
        "sin": np.sin(angles),
    }
    return model, feeds


@pytest.mark.parametrize(
    ("case", "rotary", "interleaved", "offset"),
    [
        ("start offset", 8, 0, True),
        ("start offset, interleaved", 8, 1, True),
        ("partial rotary", 6, 0, False),
        ("partial rotary, interleaved", 6, 1, False),
    ],
)
def test_contrib_rotary_embedding_is_wrong_in_openvino(case, rotary, interleaved, offset):
    """com.microsoft RotaryEmbedding: a position_ids of shape [1] (ONNX
    Runtime's start offset) is read as position 0 for every token, and a
    rotary_embedding_dim below the head size rotates wrongly."""
    batch, seq, heads, head = 2, 5, 3, 8
    if offset:
        positions = np.array([0], dtype=np.int64)
    else:
        positions = np.arange(batch * seq, dtype=np.int64).reshape(batch, seq)
    model, feeds = contrib_rotary(batch, seq, heads, head, rotary, interleaved, positions)
    assert worst(openvino_run(model, feeds), ort_run(model, feeds)) > 1.0, case


def test_the_same_node_with_full_position_ids_is_right_in_openvino():
    positions = np.arange(10, dtype=np.int64).reshape(2, 5)
    model, feeds = contrib_rotary(2, 5, 3, 8, 8, 0, positions)
    assert worst(openvino_run(model, feeds), ort_run(model, feeds)) < 1e-5


def attention_block():
    """The first 18 nodes of the LLaMA-style stack's standard-route export
    at opset 23 (quick size, batch 2, 4 tokens): RMSNormalization, the q/k/v
    projections, ONNX RotaryEmbedding on q and k, attention, Transpose."""
    from onnx.utils import Extractor

    case = build_cases(["llama_decode"], quick=True)[0]
    proto = opbridge.export.export(case.model, case.inputs, route="standard", opset=23)
    transposes = [n for n in proto.graph.node if n.op_type == "Transpose"]
    last = transposes[3].output[0]  # the attention output, back to [batch, seq, heads, head]
    block = Extractor(proto).extract_model([proto.graph.input[0].name], [last])
    return block, {proto.graph.input[0].name: case.inputs[0].numpy()}


def test_onnx_rotary_embedding_before_attention_is_wrong_in_openvino():
    """ONNX RotaryEmbedding (opset 23) on the query of an attention block,
    batch 2: OpenVINO differs by ~0.4 from ONNX Runtime, while every
    intermediate value it computes is right when exposed as an output (a
    fusion at fault); without the RotaryEmbedding on q, it is right."""
    block, feeds = attention_block()
    assert [n.op_type for n in block.graph.node].count("RotaryEmbedding") == 2
    assert worst(openvino_run(block, feeds), ort_run(block, feeds)) > 0.05


def test_openvinos_runtime_avoids_both_forms():
    runtime = runtimes.get("openvino")
    assert {"RotaryEmbedding", "com.microsoft::RotaryEmbedding"} <= runtime.avoid()


@pytest.mark.parametrize("route", ["standard", "ort"])
def test_an_export_for_openvino_computes_right_there(route):
    case = build_cases(["llama_decode"], quick=True)[0]
    runtime = runtimes.get("openvino")
    proto = opbridge.export.export(
        case.model, case.inputs, route=route, opset=23, avoid=runtime.avoid()
    )
    feeds = {proto.graph.input[0].name: case.inputs[0].numpy()}
    want = case.model(*case.inputs).detach().numpy()
    assert worst(openvino_run(proto, feeds), [want]) < 1e-5
