"""PyTorch's own exporters as a door: a model with opbridge's operators (or a
user library's) exports with a plain torch.onnx.export, by either exporter,
from a torch.export program, and through transformers' exporter, with no
opbridge call in between; the file then runs in a stock ONNX Runtime (the
library registered ONNX Runtime's way) and OpenVINO, and verifies."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import faulty_library
import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as Stock

import opbridge
from opbridge.export.metadata import METADATA_ROUTE_KEY


class Block(torch.nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.norm = opbridge.nn.RMSNorm(dim)

    def forward(self, x):
        return opbridge.scaled_clamp(self.norm(x), 0.5, -1.0, 1.0)


X = torch.randn(2, 4, 16)


def _plain_export(model, args, dynamo: bool) -> onnx.ModelProto:
    buffer = io.BytesIO()
    torch.onnx.export(model, args, buffer, dynamo=dynamo)
    return onnx.load_from_string(buffer.getvalue())


def _library_types(proto) -> list[tuple[str, str]]:
    return [(n.domain, n.op_type) for n in proto.graph.node if n.domain == "opbridge"]


def _stock_options():
    """SessionOptions with opbridge's library registered ONNX Runtime's way."""
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(opbridge.runtimes.onnxruntime.get_library_path())
    return options


def _run(session, x):
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "legacy"])
def test_a_plain_export_writes_opbridge_nodes_that_a_stock_session_runs(dynamo):
    model = Block().eval()
    proto = _plain_export(model, (X,), dynamo)
    assert _library_types(proto) == [("opbridge", "RmsNorm"), ("opbridge", "ScaledClamp")]
    assert {(o.domain, o.version) for o in proto.opset_import} >= {("opbridge", 1)}
    clamp = next(n for n in proto.graph.node if n.op_type == "ScaledClamp")
    assert {a.name: a.f for a in clamp.attribute} == {
        "scale": 0.5,
        "min_val": -1.0,
        "max_val": 1.0,
    }
    want = model(X).detach().numpy()
    got = _run(Stock(proto.SerializeToString(), _stock_options()), X)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # OpenVINO, with the extension (PyTorch's door writes the custom route).
    compiled = opbridge.runtimes.openvino.compile_model(proto, "CPU")
    np.testing.assert_allclose(compiled([X.numpy()])[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "legacy"])
def test_a_block_of_code_chooses_the_route(dynamo):
    model = Block().eval()
    with opbridge.export.route("standard"):
        proto = _plain_export(model, (X,), dynamo)
    assert _library_types(proto) == []
    want = model(X).detach().numpy()
    np.testing.assert_allclose(
        _run(Stock(proto.SerializeToString()), X), want, rtol=1e-5, atol=1e-5
    )
    import openvino

    compiled = openvino.Core().compile_model(
        openvino.Core().read_model(proto.SerializeToString(), b""), "CPU"
    )
    np.testing.assert_allclose(compiled([X.numpy()])[0], want, rtol=1e-5, atol=1e-5)
    # Per operator, and back to the default once the block ends.
    with opbridge.export.route({"rms_norm": "standard"}):
        proto = _plain_export(model, (X,), dynamo)
    assert _library_types(proto) == [("opbridge", "ScaledClamp")]
    assert opbridge.export.doors.active().route == opbridge.export.DEFAULT_ROUTE == "custom"
    proto = _plain_export(model, (X,), dynamo)
    assert _library_types(proto) == [("opbridge", "RmsNorm"), ("opbridge", "ScaledClamp")]


def test_routes_that_need_opbridges_export_are_refused():
    for route in ("function", "auto", "nope", {"rms_norm": "function"}):
        with pytest.raises(ValueError, match="route"), opbridge.export.route(route):
            pass


def test_the_dynamo_exporters_nodes_say_their_route_and_verify_reads_it(tmp_path):
    model = Block().eval()
    for route in ("custom", "standard"):
        with opbridge.export.route(route):
            proto = _plain_export(model, (X,), dynamo=True)
        marked = {
            p.value
            for n in proto.graph.node
            for p in n.metadata_props
            if p.key == METADATA_ROUTE_KEY
        }
        assert marked == {route}
        path = tmp_path / f"{route}.onnx"
        onnx.save(proto, path)
        report = opbridge.verify(model, (X,), onnx_model=path, layers=False)
        assert report.passed, report
    # The TorchScript exporter keeps no node metadata: the route is then named.
    path = tmp_path / "legacy.onnx"
    onnx.save(_plain_export(model, (X,), dynamo=False), path)
    with pytest.raises(ValueError, match="pass route="):
        opbridge.verify(model, (X,), onnx_model=path)
    assert opbridge.verify(model, (X,), onnx_model=path, route="custom", layers=False).passed


def test_an_exported_program_exports_with_the_same_operators():
    model = Block().eval()
    program = torch.export.export(model, (X,))
    onnx_program = torch.onnx.export(program)
    proto = onnx_program.model_proto
    assert _library_types(proto) == [("opbridge", "RmsNorm"), ("opbridge", "ScaledClamp")]
    got = _run(Stock(proto.SerializeToString(), _stock_options()), X)
    np.testing.assert_allclose(got, model(X).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_translation_table_the_caller_passes_wins():
    model = Block().eval()
    program = torch.onnx.export(
        model,
        (X,),
        dynamo=True,
        custom_translation_table=opbridge.export.translation_table("standard"),
    )
    assert _library_types(program.model_proto) == []


def test_opbridge_export_leaves_the_door_on_its_default():
    model = Block().eval()
    opbridge.export.export(model, (X,), route="standard", dynamo=False)
    assert _library_types(_plain_export(model, (X,), dynamo=False)) == [
        ("opbridge", "RmsNorm"),
        ("opbridge", "ScaledClamp"),
    ]


def test_transformers_exporter_exports_a_patched_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.exporters import OnnxConfig, OnnxExporter

    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 8))
    want = model(input_ids=ids).logits.detach().numpy()
    opbridge.patch(model)
    exported = OnnxExporter().export(model, {"input_ids": ids}, config=OnnxConfig())
    import onnx_ir

    proto = onnx_ir.to_proto(exported.program)
    assert {t for _, t in _library_types(proto)} == {"RmsNorm", "AddRmsNorm", "RotaryEmbedding"}
    path = tmp_path / "llama.onnx"
    onnx.save(proto, path)
    session = Stock(str(path), _stock_options())
    got = session.run(None, {"input_ids": ids.numpy()})[0]  # logits first
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert opbridge.verify(model, (ids,), onnx_model=path, layers=False).passed


USER_LIBRARY = """
import io, json, sys
import numpy as np, onnx, onnxruntime, torch
import opbridge
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as Stock

library = opbridge.load_library(sys.argv[1])


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.ops.faulty_ops.short_gradient(x * 2.0)


def export(dynamo):
    buffer = io.BytesIO()
    torch.onnx.export(
        Model().eval(), (torch.randn(4, 8),), buffer, dynamo=dynamo, input_names=["x"]
    )
    return onnx.load_from_string(buffer.getvalue())


x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
results = {}
options = onnxruntime.SessionOptions()
options.register_custom_ops_library(opbridge.runtimes.onnxruntime.get_library_path(library))
for dynamo in (True, False):
    proto = export(dynamo)
    types = [(n.domain, n.op_type) for n in proto.graph.node if n.domain == library.onnx_domain]
    (stock,) = Stock(proto.SerializeToString(), options).run(None, {"x": x})
    (ours,) = opbridge.runtimes.onnxruntime.InferenceSession(proto).run(None, {"x": x})
    with opbridge.export.route("standard"):
        standard = export(dynamo)
    (plain,) = Stock(standard.SerializeToString()).run(None, {"x": x})
    results[str(dynamo)] = {
        "custom": types,
        "stock": float(np.abs(stock - 2 * x).max()),
        "ours": float(np.abs(ours - 2 * x).max()),
        "standard": [n.domain for n in standard.graph.node if n.domain],
        "plain": float(np.abs(plain - 2 * x).max()),
    }
print(json.dumps(results))
"""


def test_a_user_librarys_operator_exports_through_the_plain_door():
    library = faulty_library.build()
    # The op's card (its standard form: y = x) is registered before the exports.
    head, _, tail = textwrap.dedent(USER_LIBRARY).partition("x = np.random")
    script = (
        head + faulty_library.register_card_code("b.op('Identity', x)") + "x = np.random" + tail
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(library)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    for dynamo in ("True", "False"):
        found = results[dynamo]
        assert found["custom"] == [["com.example.faulty", "ShortGradient"]], found
        assert found["stock"] == found["ours"] == found["plain"] == 0.0, found
        assert found["standard"] == [], found


def test_a_torch_without_the_dynamo_table_is_named_not_fatal(monkeypatch):
    # The dynamo exporter's default table is PyTorch's internal: a torch that
    # moved it gets a warning saying what still works, and opbridge imports.
    from torch.onnx._internal.exporter._torchlib import _torchlib_registry

    from opbridge.export import translation

    monkeypatch.delattr(_torchlib_registry, "_registry")
    with pytest.warns(UserWarning, match=r"has no default table .* opbridge.export.export"):
        translation._add_to_dynamo_default_table(opbridge.libraries()[0])
