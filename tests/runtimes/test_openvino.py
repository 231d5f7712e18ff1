"""OpenVINO with opbridge's extension library (libopbridge_openvino.so): every
built-in operator by every route against PyTorch, clear errors for bad
nodes, an IR that reads back, f32 by default, and verify in OpenVINO."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto

import opbridge
from opbridge import runtimes
from opbridge.ops import card, cards
from opbridge.ops.call import OpCall
from opbridge.sdk.testing import _typical_sample, export_sample

from ort_helpers import single_node_model

ov = pytest.importorskip("openvino")
openvino_runtime = pytest.importorskip("opbridge.runtimes.openvino")
if not opbridge.libraries()[0].adapter_path("openvino").is_file():
    pytest.skip("libopbridge_openvino.so was not built", allow_module_level=True)

OPS = sorted(cards())
FLOAT = TensorProto.FLOAT


def outputs_of(module, inputs) -> list[np.ndarray]:
    with torch.no_grad():
        want = module(*inputs)
    return [w.numpy() for w in (want if isinstance(want, tuple | list) else (want,))]


def run_compiled(compiled, inputs) -> list[np.ndarray]:
    feeds = {
        port.get_any_name(): t.numpy() for port, t in zip(compiled.inputs, inputs, strict=True)
    }
    results = compiled(feeds)
    return [np.asarray(results[port]) for port in compiled.outputs]


def worst(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    assert len(got) == len(want)
    return max(
        float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max())
        for g, w in zip(got, want, strict=True)
    )


def stock_compile(proto):
    """A stock OpenVINO (no extension), computing in f32."""
    core = ov.Core()
    model = core.read_model(proto.SerializeToString(), b"")
    return core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def typical(op: str):
    """The op's first sample labelled typical (several tokens, rows, ...), else
    export_sample's default."""
    samples = card(op).samples(torch.float32, large=False)
    return next((s for s in samples if s.label.startswith("typical")), None)


@pytest.mark.parametrize("route", ["custom", "function"])
@pytest.mark.parametrize("op", OPS)
def test_library_routes_run_with_the_extension(op, route):
    """OpenVINO does not inline a custom-domain node's function: the
    extension takes the function route's node as the custom route's."""
    proto, module, inputs = export_sample(card(op), typical(op), route=route)
    assert any(n.domain == "opbridge" for n in proto.graph.node)
    got = run_compiled(openvino_runtime.compile_model(proto), inputs)
    assert worst(got, outputs_of(module, inputs)) <= 1e-5


LIBRARY_FREE = [
    pytest.param(op, route, opset, id=f"{op}-{route}-{opset}")
    for op in OPS
    for route, opset in (("standard", 18), ("standard", 23), ("ort", 18))
]


@pytest.mark.parametrize(("op", "route", "opset"), LIBRARY_FREE)
def test_library_free_routes_run_in_a_stock_openvino(op, route, opset):
    """Exported for OpenVINO (without the forms it computes wrong, see
    tests/runtimes/test_openvino_forms.py)."""
    found, sample = card(op), typical(op)
    if sample is None:
        sample = _typical_sample(found)
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in sample.args)
    module = OpCall(found.call, args, sample.kwargs)
    inputs = tuple(args[p] for p in module.positions)
    avoid = runtimes.get("openvino").avoid()
    proto = opbridge.export.export(module, inputs, route=route, opset=opset, avoid=avoid)
    assert not any(n.domain == "opbridge" for n in proto.graph.node)
    assert worst(run_compiled(stock_compile(proto), inputs), outputs_of(module, inputs)) <= 1e-5


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            single_node_model(
                "RmsNorm", [("x", FLOAT, [2, 8]), ("weight", FLOAT, [2, 8])], {"eps": 1e-6}
            ),
            r"opbridge::RmsNorm\): argument 'weight' must be 1-D with 8 elements.*"
            r"got shape \[2, 8\]",
        ),
        (
            single_node_model(
                "RmsNorm", [("x", TensorProto.INT64, [2, 8]), ("weight", FLOAT, [8])], {}
            ),
            r"opbridge::RmsNorm\): argument 'x' must be float32, float64, float16 or "
            r"bfloat16, got int64",
        ),
        (
            single_node_model(
                "BiasGelu", [("x", FLOAT, [2, 8]), ("bias", FLOAT, [8])], {"approximate": "erf"}
            ),
            r"opbridge::BiasGelu\): argument 'approximate' must be 'none' or 'tanh', got 'erf'",
        ),
        (
            single_node_model("ScaledClamp", [("x", FLOAT, [2, 8])], {}),
            r"opbridge::ScaledClamp: attribute 'scale' must be present with type FLOAT "
            r"\(float\): it has no default and the node does not have it \[node 'node0'\]",
        ),
        (
            single_node_model("ScaledClamp", [("x", FLOAT, [2, 8])], {"scale": 2}),
            r"opbridge::ScaledClamp: attribute 'scale' must be present with type FLOAT "
            r"\(float\); the node has it with type INT \[node 'node0'\]",
        ),
        (
            single_node_model("RmsNorm", [("x", FLOAT, [2, 8])], {}),
            r"opbridge::RmsNorm: input 'weight' is required \(inputs x, weight, bias\?\)",
        ),
    ],
    ids=[
        "rank",
        "dtype",
        "attribute value",
        "missing attribute",
        "attribute type",
        "missing input",
    ],
)
def test_a_bad_node_is_a_clear_error(model, message):
    with pytest.raises(RuntimeError, match=message):
        openvino_runtime.compile_model(model)


def test_a_bad_shape_known_only_at_run_time_is_a_clear_error():
    model = single_node_model(
        "RmsNorm", [("x", FLOAT, [None, None]), ("weight", FLOAT, [None])], {}
    )
    compiled = openvino_runtime.compile_model(model)
    x = np.ones((2, 8), np.float32)
    with pytest.raises(
        RuntimeError, match=r"argument 'weight' must be 1-D with 8 elements.*got shape \[4\]"
    ):
        compiled({"x": x, "weight": np.ones(4, np.float32)})
    (y,) = run_compiled(compiled, (torch.from_numpy(x), torch.ones(8)))
    assert worst([y], [opbridge.rms_norm(torch.from_numpy(x), torch.ones(8)).numpy()]) <= 1e-5


def test_an_ir_saved_with_save_model_reads_back_with_the_extension(tmp_path):
    """LayerNorm with a bias and no weight (an absent input in the middle)
    and an eps that float32 only approximates: the IR keeps both."""
    model = single_node_model(
        "LayerNorm",
        [("x", FLOAT, [3, 8]), ("bias", FLOAT, [8])],
        {"eps": 1e-12},
        node_inputs=["x", "", "bias"],
    )
    path = tmp_path / "layer_norm.xml"
    ov.save_model(openvino_runtime.read_model(model), path, compress_to_fp16=False)
    core = ov.Core()
    with pytest.raises(RuntimeError, match="LayerNorm"):
        core.read_model(path)  # without the extension
    core.add_extension(openvino_runtime.get_library_path())
    compiled = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x, bias = torch.randn(3, 8), torch.randn(8)
    want = torch.nn.functional.layer_norm(x, (8,), None, bias, eps=float(np.float32(1e-12)))
    assert worst(run_compiled(compiled, (x, bias)), [want.numpy()]) <= 1e-5
    assert (
        worst(run_compiled(openvino_runtime.compile_model(path), (x, bias)), [want.numpy()]) <= 1e-5
    )


def test_compile_model_computes_in_f32_unless_asked_otherwise():
    proto, _, _ = export_sample(card("rms_norm"), route="custom")
    # The CPU plugin's compiled model says its precision (AUTO's does not).
    compiled = opbridge.runtimes.openvino.compile_model(proto, "CPU")
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
    if ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT") == ov.Type.bf16:
        asked = opbridge.runtimes.openvino.compile_model(
            proto, device_name="CPU", config={"INFERENCE_PRECISION_HINT": "bf16"}
        )
        assert asked.get_property("INFERENCE_PRECISION_HINT") == ov.Type.bf16


def test_the_runtime_is_registered():
    runtime = runtimes.get("openvino")
    assert runtimes.get("ov") is runtime and runtime.short == "ov"
    assert opbridge.runtimes.openvino.compile_model is openvino_runtime.compile_model
    assert runtime.library_path(opbridge.libraries()[0]).endswith("libopbridge_openvino.so")
    assert runtime.levels() == [runtime.base_level] == [runtime.default_level]
    checks = {check.name: check for check in runtime.checks()}
    assert all(check.ok for check in checks.values()), checks
    assert "OpenVINO runs opbridge::RmsNorm" in checks


@pytest.mark.parametrize("build", ["build_llama_block", "build_vision"])
def test_verify_passes_in_openvino_by_the_custom_route(build):
    from opbridge.demo import models

    model, args = getattr(models, build)()
    report = opbridge.verify(model, args, route="custom", runtime="openvino", draws=1, layers=False)
    assert report.passed, report.failures()
    assert report.runtime == "openvino"


@pytest.mark.parametrize("route", ["custom", "function", "standard", "ort"])
def test_a_patched_hugging_face_llama_verifies_in_openvino(route):
    """A tiny random Llama (nothing downloaded), patched, by every route,
    against the unpatched model, with a dynamic batch and sequence."""
    import copy

    from opbridge.integrations import hf

    model = hf.random_model("llama")
    output = hf.FAMILIES["llama"][1]
    example = hf.example_inputs(model, batch=2, seq=7)
    reference = hf.Output(copy.deepcopy(model), output)
    opbridge.patch(model)
    report = opbridge.verify(
        hf.Output(model, output),
        example,
        route=route,
        runtime="openvino",
        reference=reference,
        dynamic_sequence=True,
        draws=1,
        layers=False,
    )
    assert report.passed, report.failures()


def test_float16_runs_with_the_extension():
    """The extension's kernels take float16 as in ONNX Runtime (computed in
    float32): within float16's tolerance of PyTorch."""
    x = torch.randn(4, 32).to(torch.float16)
    weight = (1 + 0.1 * torch.randn(32)).to(torch.float16)
    module = OpCall(opbridge.rms_norm, (x, weight), {})
    proto = opbridge.export.export(module, (x, weight), route="custom", verbose=False)
    compiled = openvino_runtime.compile_model(proto)
    feeds = {p.get_any_name(): t.numpy() for p, t in zip(compiled.inputs, (x, weight), strict=True)}
    got = compiled(feeds)[compiled.outputs[0]]
    assert got.dtype == np.float16
    want = opbridge.rms_norm(x, weight).float().numpy()
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-3, atol=1e-3)


def test_bfloat16_runs_with_the_extension():
    """bfloat16 too (numpy has no bfloat16: the bits go through as uint16),
    equal to PyTorch's result: the same kernel, computed in float32."""

    def bits(t: torch.Tensor):
        tensor = ov.Tensor(ov.Type.bf16, list(t.shape))
        tensor.data[...] = t.view(torch.int16).numpy().view(tensor.data.dtype)
        return tensor

    x = torch.randn(4, 32).to(torch.bfloat16)
    weight = (1 + 0.1 * torch.randn(32)).to(torch.bfloat16)
    module = OpCall(opbridge.rms_norm, (x, weight), {})
    proto = opbridge.export.export(module, (x, weight), route="custom", verbose=False)
    compiled = openvino_runtime.compile_model(proto)
    assert [p.get_element_type() for p in compiled.outputs] == [ov.Type.bf16]
    request = compiled.create_infer_request()
    request.infer({0: bits(x), 1: bits(weight)})
    raw = np.array(request.get_output_tensor(0).data).view(np.int16)
    got = torch.from_numpy(raw.copy()).view(torch.bfloat16)
    want = opbridge.rms_norm(x, weight)
    runs_as = {
        op.get_friendly_name(): op.get_output_element_type(0)
        for op in compiled.get_runtime_model().get_ordered_ops()
    }
    if runs_as.get("rms_norm") == ov.Type.bf16:
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    else:
        # A CPU without bfloat16 instructions: OpenVINO's plugin converts the
        # inputs to float32 around the extension's node, which then runs the
        # float32 kernel, and rounds its output back with its own conversion,
        # which differs from round-to-nearest-even by one unit in the last
        # place at most.
        assert runs_as.get("rms_norm") == ov.Type.f32, runs_as
        ulp = 2.0 ** (torch.floor(torch.log2(want.float().abs().clamp_min(1e-30))) - 7)
        assert bool(((got.float() - want.float()).abs() <= ulp).all()), (got, want)


def test_auto_for_openvino_chooses_per_op_among_what_verifies_there():
    """route="auto" with runtime="openvino" measures the custom route (the
    extension's evaluate) against OpenVINO's own forms of the standard and
    ort routes, per op, and the export of its plan computes right there."""
    from opbridge.autoroute import choose
    from opbridge.demo import models

    model, args = models.build_llama_block()
    choice = choose(model, args, runtime="openvino")
    assert set(choice.plan.values()) <= {"custom", "standard", "ort"}
    assert choice.avoid == runtimes.get("openvino").avoid()
    proto = opbridge.export.export(model, args, route=choice, dynamic_batch=True, verbose=False)
    # The plan may pick any route per op (it is measured); whichever it picks,
    # no form OpenVINO computes wrong is emitted. The custom route's own node
    # (opbridge::RotaryEmbedding) is not one of them.
    emitted = {f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in proto.graph.node}
    assert not emitted & choice.avoid, sorted(emitted)
    report = opbridge.verify(
        model, args, onnx_model=proto, runtime="openvino", draws=1, layers=False
    )
    assert report.passed, report.failures()


@pytest.mark.parametrize("rotary_route", ["custom", "standard", "ort"])
def test_a_plan_for_openvino_emits_no_wrong_form_whatever_rotary_takes(rotary_route):
    """The measured plan may give rotary_embedding any route; each export of
    it for OpenVINO leaves out the forms OpenVINO computes wrong, and only the
    custom route keeps a RotaryEmbedding (its own, domain opbridge)."""
    from opbridge.autoroute import RouteChoice
    from opbridge.demo import models

    model, args = models.build_llama_block()
    avoid = runtimes.get("openvino").avoid()
    choice = RouteChoice(plan={"rotary_embedding": rotary_route}, avoid=avoid)
    proto = opbridge.export.export(model, args, route=choice, verbose=False)
    emitted = {f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in proto.graph.node}
    assert not emitted & avoid, sorted(emitted)
    rotary = {name for name in emitted if name.endswith("RotaryEmbedding")}
    assert rotary == ({"opbridge::RotaryEmbedding"} if rotary_route == "custom" else set())
