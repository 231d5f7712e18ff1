"""A plain ONNX Runtime custom-op library (tests/plain_ort_library.c), written
against ONNX Runtime's C API only, not opbridge's SDK: a user's own library,
registered in ``SessionOptions`` next to opbridge's. Its domain
``test.plain`` has one op, ``Negate`` (float32 y = -x)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from paths import ROOT

SOURCE = ROOT / "tests" / "plain_ort_library.c"
HEADERS = ROOT / "third_party" / "onnxruntime" / "usr" / "include" / "onnxruntime"
DOMAIN = "test.plain"
LIBRARY_NAME = "libplain_ort.so"


def build(folder: Path) -> Path:
    """The library compiled with the system C compiler into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    library = folder / LIBRARY_NAME
    command = [
        "cc",
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Werror",
        "-I",
        str(HEADERS),
        "-o",
        str(library),
        str(SOURCE),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, (
        f"{' '.join(command)}\nexit status {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return library


def _negate_node(output: str) -> onnx.NodeProto:
    return helper.make_node("Negate", ["x"], [output], domain=DOMAIN, name="negate")


def negate_model() -> onnx.ModelProto:
    """One node, ``test.plain::Negate``: x float[2, 3] -> y."""
    graph = helper.make_graph(
        [_negate_node("y")],
        "plain_negate",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)],
        ir_version=10,
    )


def mixed_model() -> onnx.ModelProto:
    """``test.plain::Negate`` then ``opbridge::ScaledClamp`` (scale 2, between
    -10 and 10): x float[2, 3] -> y = clamp(-2 x, -10, 10)."""
    clamp = helper.make_node(
        "ScaledClamp",
        ["negated"],
        ["y"],
        domain="opbridge",
        name="scaled_clamp",
        scale=2.0,
        min_val=-10.0,
        max_val=10.0,
    )
    graph = helper.make_graph(
        [_negate_node("negated"), clamp],
        "plain_then_opbridge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        # Negate's shape, stated: the plain library has no shape function, and
        # ScaledClamp's reads an input of unknown rank as a scalar.
        value_info=[helper.make_tensor_value_info("negated", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(
        graph,
        opset_imports=[
            helper.make_opsetid("", 18),
            helper.make_opsetid(DOMAIN, 1),
            helper.make_opsetid("opbridge", 1),
        ],
        ir_version=10,
    )
