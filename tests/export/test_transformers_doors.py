"""transformers' exporters as a door for a model that ``opbridge.patch``
changed: a patched Llama exported by ``OnnxExporter`` runs in OpenVINO (with
opbridge's extension, or by the standard route with none), and a model whose
module a user's patch rule replaced by a user library's operator exports by
``OnnxExporter`` and runs in a stock ONNX Runtime session, the library
registered ONNX Runtime's way (or, by the standard route, no library).

transformers' ``OpenVINOExporter`` converts the torch.export program with
OpenVINO's PyTorch frontend: tests/runtimes/test_openvino_pytorch_frontend.py
runs it (importing opbridge hands the exporter opbridge's extensions)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import faulty_library
import numpy as np
import onnx_ir
import pytest
import torch

import opbridge

transformers = pytest.importorskip("transformers")
openvino = pytest.importorskip("openvino")
exporters = pytest.importorskip("transformers.exporters")


def _tiny_llama():
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _onnx_export(model, inputs):
    exported = exporters.OnnxExporter().export(model, inputs, config=exporters.OnnxConfig())
    return onnx_ir.to_proto(exported.program)


def _library_types(proto) -> set[str]:
    return {n.op_type for n in proto.graph.node if n.domain == "opbridge"}


def _logits(compiled, ids) -> np.ndarray:
    return compiled({"input_ids": ids.numpy()})[compiled.output("logits")]


def test_onnx_exporters_patched_llama_runs_in_openvino():
    model = _tiny_llama()
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    want = model(input_ids=ids).logits.detach().numpy()
    opbridge.patch(model)
    fused = {"RmsNorm", "AddRmsNorm", "RotaryEmbedding"}

    # The custom route (the default): opbridge's nodes, which OpenVINO reads
    # with opbridge's extension added.
    proto = _onnx_export(model, {"input_ids": ids})
    assert _library_types(proto) == fused
    compiled = opbridge.runtimes.openvino.compile_model(proto, "CPU")
    np.testing.assert_allclose(_logits(compiled, ids), want, rtol=1e-4, atol=1e-4)

    # The standard route: plain ONNX operators, read by a stock OpenVINO with
    # no extension at all.
    with opbridge.export.route("standard"):
        proto = _onnx_export(model, {"input_ids": ids})
    assert _library_types(proto) == set()
    assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}
    core = openvino.Core()
    compiled = core.compile_model(
        core.read_model(proto.SerializeToString(), b""),
        "CPU",
        {"INFERENCE_PRECISION_HINT": openvino.Type.f32},
    )
    np.testing.assert_allclose(_logits(compiled, ids), want, rtol=1e-4, atol=1e-4)


# Runs in a process of its own: loading a user's library registers its
# operators with PyTorch and the exporters for the rest of the process.
USER_RULE = """
import json, sys
import numpy as np, onnxruntime, onnx_ir, torch
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as Stock
from transformers.exporters import OnnxConfig, OnnxExporter
import opbridge

library = opbridge.load_library(sys.argv[1])
# faulty_ops::short_map_gradient computes y = 2 x (its backward is the
# faulty part); its card gives the standard route's form.
opbridge.ops.register_card(
    opbridge.ops.Card(
        name="short_map_gradient",
        namespace="faulty_ops",
        call=torch.ops.faulty_ops.short_map_gradient,
        standard=lambda b, x: b.op("Add", x, x),
        reference=lambda x: x + x,
    )
)


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


class LibraryDouble(torch.nn.Module):
    def forward(self, x):
        return torch.ops.faulty_ops.short_map_gradient(x)


def double_rule(parent, name, child):
    return {name: LibraryDouble()} if type(child) is Double else None


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.twice = Double()
        self.norm = torch.nn.RMSNorm(32, eps=1e-6)
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.down(self.norm(self.twice(self.up(x))))


torch.manual_seed(0)
model = Model().eval()
x = torch.randn(2, 5, 16)
want = model(x).detach().numpy()
opbridge.patch(model, rules=[double_rule])


def export():
    exported = OnnxExporter().export(model, {"x": x}, config=OnnxConfig())
    return onnx_ir.to_proto(exported.program)


def error(got):
    return float(np.abs(got - want).max())


proto = export()
options = onnxruntime.SessionOptions()
for path in (
    opbridge.runtimes.onnxruntime.get_library_path(),
    opbridge.runtimes.onnxruntime.get_library_path(library),
):
    options.register_custom_ops_library(path)
(stock,) = Stock(proto.SerializeToString(), options).run(None, {"x": x.numpy()})
with opbridge.export.route("standard"):
    standard = export()
(plain,) = Stock(standard.SerializeToString()).run(None, {"x": x.numpy()})
print(json.dumps({
    "replaced": sorted(
        (r.path, r.rule, type(r.replacement).__name__)
        for r in model.opbridge_patch_summary.replaced
    ),
    "patched": error(model(x).detach().numpy()),
    "custom": sorted((n.domain, n.op_type) for n in proto.graph.node if n.domain),
    "stock": error(stock),
    "standard": sorted({n.domain for n in standard.graph.node}),
    "plain": error(plain),
}))
"""


def test_a_user_rules_library_operator_exports_through_transformers_exporter():
    library = faulty_library.build()
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(USER_RULE), str(library)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    # The user's rule and opbridge's own both replaced a module.
    assert found["replaced"] == [
        ["norm", "torch.nn.RMSNorm", "RMSNorm"],
        ["twice", "double_rule", "LibraryDouble"],
    ], found
    assert found["patched"] <= 1e-5, found
    # The custom route: one node per operator, each in its library's domain,
    # run by a stock session with both libraries registered.
    assert found["custom"] == [
        ["com.example.faulty", "ShortMapGradient"],
        ["opbridge", "RmsNorm"],
    ], found
    assert found["stock"] <= 1e-5, found
    # The standard route: plain ONNX operators only, in a session with no library.
    assert found["standard"] == [""], found
    assert found["plain"] <= 1e-5, found
