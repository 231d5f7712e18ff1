"""Running models in ONNX Runtime with the opbridge library."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import opbridge

# The levels every model is checked at: the graph as exported, and every fusion.
LEVELS = ("disable_all", "enable_all")
ONNX_DTYPES = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.uint8: TensorProto.UINT8,
}


def session(model, level="enable_all"):
    return opbridge.runtimes.onnxruntime.InferenceSession(model, optimization_level=level)


def run(model, feeds: list[np.ndarray], level="enable_all") -> list[np.ndarray]:
    sess = session(model, level)
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, feeds, strict=True)))


def single_node_model(
    op_type: str,
    inputs: list[tuple[str, int, list]],
    attrs: dict,
    *,
    output_type: int = TensorProto.FLOAT,
    domain_version: int = 1,
    node_inputs: list[str] | None = None,
    outputs: list[tuple[str, int]] | None = None,
    domain: str = "opbridge",
) -> onnx.ModelProto:
    """A one-node model in the opbridge domain (or ``domain``), built by hand
    (one output "y" of ``output_type`` unless ``outputs`` names them)."""
    outputs = outputs or [("y", output_type)]
    node = helper.make_node(
        op_type,
        node_inputs if node_inputs is not None else [name for name, _, _ in inputs],
        [name for name, _ in outputs],
        domain=domain,
        name="node0",
        **attrs,
    )
    graph = helper.make_graph(
        [node],
        "single_node",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs],
    )
    return helper.make_model(
        graph,
        opset_imports=[
            helper.make_opsetid("", 18),
            helper.make_opsetid(domain, domain_version),
        ],
        ir_version=10,
    )
