"""opbridge.verify: a correct model passes; injected faults are caught and located."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

import opbridge
from opbridge.__main__ import main
from opbridge.cli.common import FactoryError, build_model
from opbridge.demo import build_demo
from opbridge.runtimes.onnxruntime import available_levels
from opbridge.verify import (
    FAIL,
    PASS,
    compare,
    default_session_factory,
    map_modules,
)

EXPORT_BATCH = 2
DIVERGING_MODULE = "blocks.1.norm"
MODULES = [
    "blocks.0.norm",
    "blocks.0.fc1",
    "blocks.0.act",
    "blocks.0.fc2",
    "blocks.0",
    "blocks.1.norm",
    "blocks.1.fc1",
    "blocks.1.act",
    "blocks.1.fc2",
    "blocks.1",
    "norm",
]
FACTORY_SOURCE = """
from opbridge.demo import build_demo


def make():
    return build_demo(batch=2, seq=8, dim=32)


def needs_argument(size):
    return build_demo(dim=size)


def not_a_pair():
    return 3
"""


def small_demo():
    """The demo model, small: two blocks and a final norm over [2, 8, 32]."""
    return build_demo(batch=EXPORT_BATCH, seq=8, dim=32)


@pytest.fixture(scope="module")
def demo():
    return small_demo()


@pytest.fixture(scope="module")
def custom_proto(demo):
    model, args = demo
    return opbridge.export.export(model, args, route="custom", dynamic_batch=True, verbose=False)


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def _node_of(proto: onnx.ModelProto, module: str) -> onnx.NodeProto:
    """The node whose output is ``module``'s output."""
    output = map_modules(proto)[module][0]
    return next(node for node in proto.graph.node if output in node.output)


def _cells(report, predicate):
    return [c for c in report.cells if predicate(c)]


# ---------------------------------------------------------------- correct models


@pytest.mark.parametrize("route", ["custom", "standard"])
def test_correct_model_passes(demo, route):
    model, args = demo
    made = []

    def recording_factory(model_bytes, level):
        session = default_session_factory(model_bytes, level)
        made.append((level, session.get_session_options().graph_optimization_level))
        return session

    report = opbridge.verify(model, args, route=route, session_factory=recording_factory)

    assert report.passed, report.format()
    assert isinstance(report, opbridge.VerificationReport)
    assert report.failures() == []
    assert report.route == route
    assert [c.status for c in report.structure] == [PASS] * len(report.structure)
    names = [c.name for c in report.structure]
    if route == "standard":
        assert "standard route: no opbridge node" in names
    else:
        assert "opbridge nodes match the specs" in names
    assert report.inputs[0]["dynamic_dims"] == [0]
    assert report.outputs_info[0]["dynamic_dims"] == [0]
    # Final outputs, with statistics on both sides.
    (output,) = report.outputs
    assert output.passed and output.max_abs_err <= 1e-5 and output.cosine > 0.999999
    assert output.torch.var == pytest.approx(output.ort.var, rel=1e-4)
    # Every level ONNX Runtime 1.30 has, really applied to the sessions.
    assert report.levels == available_levels() == list(LEVELS_1_30)
    levels_made = {level: applied for level, applied in made}
    assert set(levels_made) == set(LEVELS_1_30)
    for level, applied in levels_made.items():
        assert applied == getattr(onnxruntime.GraphOptimizationLevel, LEVELS_1_30[level])
    # Batches 1, the export batch and a large one; three draws at the export batch.
    assert report.batch_sweep == "ran: 1, 2, 16"
    cases = list(dict.fromkeys((c.case, c.batch) for c in report.cells))
    assert cases == [("example", 2), ("draw 1", 2), ("draw 2", 2), ("batch 1", 1), ("batch 16", 16)]
    assert len(report.cells) == len(cases) * len(report.levels)
    assert report.fusion_problems == []
    # Layer by layer: every module mapped, in execution order.
    assert report.layer_mapping.startswith("available")
    assert [r.module for r in report.layers] == MODULES
    assert all(r.status == PASS and r.worst is not None for r in report.layers)
    assert report.first_divergence is None


LEVELS_1_30 = {
    "disable_all": "ORT_DISABLE_ALL",
    "enable_basic": "ORT_ENABLE_BASIC",
    "enable_extended": "ORT_ENABLE_EXTENDED",
    "enable_layout": "ORT_ENABLE_LAYOUT",
    "enable_all": "ORT_ENABLE_ALL",
}


# ---------------------------------------------------------------- injected faults


def test_fault_eps_changed_in_saved_file(demo, custom_proto, tmp_path):
    """(a) One RmsNorm's eps edited in the saved file: caught and located."""
    model, args = demo
    proto = _copy(custom_proto)
    node = _node_of(proto, DIVERGING_MODULE)
    assert node.op_type == "RmsNorm"
    (eps,) = [a for a in node.attribute if a.name == "eps"]
    eps.f = 0.1
    path = tmp_path / "faulty.onnx"
    onnx.save(proto, path)

    report = opbridge.verify(model, args, onnx_model=path)

    assert not report.passed
    assert report.first_divergence == DIVERGING_MODULE
    # The file is well formed: only the numbers are wrong.
    assert all(c.status == PASS for c in report.structure)
    assert not report.outputs[0].passed
    layers = {r.module: r for r in report.layers}
    before = MODULES[: MODULES.index(DIVERGING_MODULE)]
    assert all(layers[m].status == PASS for m in before)
    diverged = report.first_divergence_layer
    assert diverged.status == FAIL and diverged.worst.max_abs_err > 1e-3
    assert f"first divergence: {DIVERGING_MODULE}" in report.format()
    assert report.fusion_problems == []


def _batch_baked_rms_norm(correct):
    """The standard decomposition of rms_norm, except for DIVERGING_MODULE's
    node (the one whose weight is that module's parameter, as the dynamo
    exporter names it): that one takes the row length from the element count
    with the export batch and sequence (2 x 8) baked in, which is right at
    batch 2 only."""
    diverging = "p_" + DIVERGING_MODULE.replace(".", "_") + "_weight"

    def standard(b, x, weight, bias=None, *, eps):
        if getattr(weight, "name", None) != diverging:
            return correct(b, x, weight, bias, eps=eps)
        count = b.op("Cast", b.op("Size", x), to=onnx.TensorProto.FLOAT)
        row = b.op("Div", count, b.constant(EXPORT_BATCH * 8.0, like=x))
        total = b.op("ReduceSum", b.op("Mul", x, x), b.ints([-1]), keepdims=1)
        rms = b.op("Sqrt", b.op("Add", b.op("Div", total, row), b.constant(eps, like=x)))
        y = b.op("Mul", b.op("Div", x, rms), weight)
        return y if bias is None else b.op("Add", y, bias)

    return standard


def test_fault_decomposition_wrong_at_other_batch(demo, monkeypatch):
    """(b) A decomposition right at the export batch, wrong at others."""
    model, args = demo
    card = opbridge.ops.card("rms_norm")
    monkeypatch.setattr(card, "standard", _batch_baked_rms_norm(card.standard))

    report = opbridge.verify(model, args, route="standard")

    assert not report.passed
    assert report.first_divergence == DIVERGING_MODULE
    at_export_batch = _cells(report, lambda c: c.batch == EXPORT_BATCH)
    other_batches = _cells(report, lambda c: c.batch != EXPORT_BATCH)
    assert at_export_batch and all(c.status == PASS for c in at_export_batch)
    assert {c.batch for c in other_batches} == {1, 16}
    assert all(c.status == FAIL for c in other_batches)
    # Wrong at every level alike: a decomposition problem, not a fusion one.
    assert report.fusion_problems == []
    assert report.first_divergence_layer.case in ("batch 1", "batch 16")


class _OffByFusion:
    """A session whose outputs are off by 1e-3, as a wrong fusion would make them."""

    def __init__(self, session):
        self.session = session

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feed):
        return [value + np.float32(1e-3) for value in self.session.run(names, feed)]


def test_fault_results_differ_between_levels():
    """(c) Results that change from ORT_ENABLE_EXTENDED up are flagged with the level."""
    model, args = small_demo()
    broken = {"enable_extended", "enable_layout", "enable_all"}
    made = []

    def factory(model_bytes, level):
        made.append(level)
        session = default_session_factory(model_bytes, level)
        return _OffByFusion(session) if level in broken else session

    report = opbridge.verify(
        model, args, route="custom", session_factory=factory, batch_sizes=[EXPORT_BATCH]
    )

    assert not report.passed
    assert report.fusion_problems == ["enable_extended", "enable_layout", "enable_all"]
    for cell in report.cells:
        assert (cell.status == FAIL) == (cell.level in broken), cell
    text = report.format()
    assert "FUSION PROBLEM at enable_extended (ORT_ENABLE_EXTENDED)" in text
    assert "FUSION PROBLEM at enable_basic" not in text
    # The levels that changed the results are also compared layer by layer.
    assert set(made) >= broken | {"disable_all", "enable_basic"}
    assert report.first_divergence == MODULES[0]
    assert report.first_divergence_layer.level in broken


# ---------------------------------------------------------------- structure


def test_structure_catches_attribute_and_route_errors(demo, custom_proto):
    model, args = demo
    proto = _copy(custom_proto)
    node = _node_of(proto, "blocks.0.norm")
    del node.attribute[:]
    node.attribute.append(onnx.helper.make_attribute("epsilon", 1e-6))
    act = _node_of(proto, "blocks.0.act")
    (scale,) = [a for a in act.attribute if a.name == "scale"]
    act.attribute.remove(scale)
    act.attribute.append(onnx.helper.make_attribute("scale", 2))

    report = opbridge.verify(model, args, onnx_model=proto, levels=["disable_all"], layers=False)

    assert not report.passed
    (check,) = [c for c in report.structure if c.name == "opbridge nodes match the specs"]
    assert check.status == FAIL
    assert "unknown attribute 'epsilon'" in check.detail
    assert "attribute 'eps' is missing" in check.detail
    assert "attribute 'scale' is INT, the spec says FLOAT" in check.detail
    # ONNX Runtime refuses the model too; that is reported, not raised.
    assert any("could not load" in e for e in report.errors)


def test_structure_standard_route_with_custom_nodes(demo, custom_proto):
    model, args = demo
    proto = _copy(custom_proto)
    for prop in proto.metadata_props:
        if prop.key == "opbridge.route":
            prop.value = "standard"
        if prop.key == "opbridge.domain_version":
            prop.value = "7"

    report = opbridge.verify(model, args, onnx_model=proto, levels=["disable_all"], layers=False)

    assert report.route == "standard"
    checks = {c.name: c for c in report.structure}
    assert checks["standard route: no opbridge node"].status == FAIL
    assert "5 opbridge nodes" in checks["standard route: no opbridge node"].detail
    assert checks["metadata vs library"].status == FAIL
    assert "domain version 7" in checks["metadata vs library"].detail
    assert not report.passed


def test_structure_input_mismatch(custom_proto):
    model, _ = small_demo()
    wider = (torch.randn(2, 8, 32, dtype=torch.float64),)

    report = opbridge.verify(
        model.double(), wider, onnx_model=custom_proto, levels=["disable_all"], layers=False
    )

    checks = {c.name: c for c in report.structure}
    assert checks["inputs"].status == FAIL
    assert "dtype float32 vs torch.float64" in checks["inputs"].detail
    assert not report.passed


# ---------------------------------------------------------------- degraded modes


def test_layers_unavailable_without_exporter_metadata(demo, custom_proto):
    model, args = demo
    proto = _copy(custom_proto)
    for node in proto.graph.node:
        del node.metadata_props[:]

    report = opbridge.verify(model, args, onnx_model=proto, levels=["disable_all"], draws=1)

    assert report.passed, report.format()
    assert report.layer_mapping.startswith("unavailable: the model carries no exporter scope")
    assert report.layers == [] and report.first_divergence is None
    assert "Layer by layer: unavailable" in report.format()


def test_layers_without_value_info(demo, custom_proto):
    """Intermediate values get their types by shape inference, or from PyTorch
    where inference cannot see through an opbridge node."""
    model, args = demo
    proto = _copy(custom_proto)
    del proto.graph.value_info[:]

    report = opbridge.verify(model, args, onnx_model=proto, levels=["disable_all"], draws=1)

    assert report.passed, report.format()
    assert [r.module for r in report.layers if r.status == PASS] == MODULES


def test_legacy_exporter_degrades_layer_by_layer(demo):
    model, args = demo
    report = opbridge.verify(
        model, args, route="custom", dynamo=False, levels=["disable_all"], draws=1
    )
    assert report.passed, report.format()
    assert report.layer_mapping.startswith("unavailable")
    assert report.batch_sweep == "ran: 1, 2, 16"


def test_static_batch_sweep_not_applicable(demo):
    model, args = demo
    report = opbridge.verify(
        model, args, dynamic_batch=False, route="standard", levels=["disable_all"], draws=1
    )
    assert report.passed, report.format()
    assert report.inputs[0]["dynamic_dims"] == []
    assert report.batch_sweep.startswith("not applicable")
    assert {c.batch for c in report.cells} == {EXPORT_BATCH}


def test_user_inputs_from_npz(demo, custom_proto, tmp_path):
    model, args = demo
    generator = np.random.default_rng(0)
    path = tmp_path / "mine.npz"
    np.savez(path, x=generator.standard_normal((3, 8, 32)).astype(np.float32))

    report = opbridge.verify(
        model, args, onnx_model=custom_proto, inputs=[path], levels=["disable_all"]
    )

    assert report.passed, report.format()
    assert [(c.case, c.batch) for c in report.cells][:2] == [("example", 2), ("mine.npz", 3)]

    np.savez(tmp_path / "wrong.npz", y=np.zeros((2, 8, 32), np.float32), z=np.zeros(1))
    with pytest.raises(ValueError, match=r"holds arrays \['y', 'z'\]; expected the model's inputs"):
        opbridge.verify(model, args, onnx_model=custom_proto, inputs=tmp_path / "wrong.npz")


def test_bad_arguments_are_named(demo):
    model, args = demo
    with pytest.raises(ValueError, match="route must be one of"):
        opbridge.verify(model, args, route="fast")
    with pytest.raises(ValueError, match=r"unknown optimization level\(s\) \['max'\]"):
        opbridge.verify(model, args, route="custom", levels=["max"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        opbridge.verify(model, args, onnx_model="no/such/model.onnx")


def test_route_is_required_to_export_and_must_match_a_given_model(demo, custom_proto):
    model, args = demo
    with pytest.raises(TypeError, match=r"route is required to export the model: pass route="):
        opbridge.verify(model, args)
    with pytest.raises(
        ValueError,
        match=r"route='standard' was given, but .* exported by route 'custom'; pass route='custom'",
    ):
        opbridge.verify(model, args, onnx_model=custom_proto, route="standard")
    unmarked = _copy(custom_proto)
    del unmarked.metadata_props[:]
    with pytest.raises(ValueError, match=r"has no opbridge.route metadata .* pass route="):
        opbridge.verify(model, args, onnx_model=unmarked)
    # Given, the route decides which structure rules a model without metadata follows.
    report = opbridge.verify(
        model, args, onnx_model=unmarked, route="standard", levels=["disable_all"], layers=False
    )
    assert report.route == "standard"
    checks = {c.name: c for c in report.structure}
    assert checks["standard route: no opbridge node"].status == FAIL


# ---------------------------------------------------------------- metrics


def test_compare_tolerance_and_special_values():
    want = np.array([1.0, 100.0, 0.0, np.nan, np.inf], np.float64)
    edge = want + np.array([1e-5 + 1e-5, 1e-5 + 1e-3, 1e-5, 0, 0])
    assert compare("y", edge * (1 - 1e-12), want, 1e-5, 1e-5).passed
    over = edge + np.array([1e-9, 0, 0, 0, 0])
    result = compare("y", over, want, 1e-5, 1e-5)
    assert not result.passed and result.mismatched == 1
    assert result.tolerance_ratio > 1.0
    nan_where_number = compare("y", np.array([np.nan]), np.array([1.0]), 1e-5, 1e-5)
    assert not nan_where_number.passed and nan_where_number.max_abs_err == np.inf
    other_infinity = compare("y", np.array([-np.inf]), np.array([np.inf]), 1e-5, 1e-5)
    assert not other_infinity.passed
    shape = compare("y", np.zeros((2, 3)), np.zeros((3, 2)), 1e-5, 1e-5)
    assert not shape.passed and "shape [2, 3] in the runtime, [3, 2] in PyTorch" in shape.detail
    same = compare("y", np.array([1.0, -2.0]), np.array([1.0, -2.0]), 0, 0)
    assert same.passed and same.cosine == pytest.approx(1.0) and same.max_rel_err == 0


# ---------------------------------------------------------------- CLI


def test_factory_errors_name_expected_and_given(tmp_path):
    factory = tmp_path / "models.py"
    factory.write_text(FACTORY_SOURCE)
    with pytest.raises(FactoryError, match=r"expected 'path/to/file.py:function'.*got 'nope'"):
        build_model("nope")
    with pytest.raises(FactoryError, match=r"expected a Python file.*got 'models.txt'"):
        build_model("models.txt:make")
    with pytest.raises(FactoryError, match=r"does not exist"):
        build_model(f"{tmp_path}/missing.py:make")
    with pytest.raises(FactoryError, match=r"has no function 'build' \(it defines \['make', "):
        build_model(f"{factory}:build")
    with pytest.raises(FactoryError, match=r"callable without arguments"):
        build_model(f"{factory}:needs_argument")
    with pytest.raises(FactoryError, match=r"must return \(model, example_inputs\), got int"):
        build_model(f"{factory}:not_a_pair")
    model, args = build_model(f"{factory}:make")
    assert isinstance(model, torch.nn.Module) and args[0].shape == (2, 8, 32)


def test_cli_bad_factory_exits_2(capsys):
    assert main(["verify", "no_colon_here"]) == 2
    assert "expected 'path/to/file.py:function'" in capsys.readouterr().err


def test_cli_needs_a_route_to_export(tmp_path, capsys):
    factory = tmp_path / "models.py"
    factory.write_text(FACTORY_SOURCE)
    assert main(["verify", f"{factory}:make"]) == 2
    assert "--route is required to export the model" in capsys.readouterr().err


def test_cli_passing_model_json_to_stdout(tmp_path, capsys):
    factory = tmp_path / "models.py"
    factory.write_text(FACTORY_SOURCE)
    levels = ["--levels", "disable_all,enable_all", "--draws", "1", "--batch-sizes", "1,2"]
    status = main(["verify", f"{factory}:make", *levels, "--route", "standard", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert status == 0
    assert data["passed"] is True and data["route"] == "standard"
    assert data["levels"] == ["disable_all", "enable_all"]
    assert [layer["module"] for layer in data["layers"]] == MODULES


def test_cli_failing_model_exits_nonzero_with_json_and_png(custom_proto, tmp_path):
    proto = _copy(custom_proto)
    (eps,) = [a for a in _node_of(proto, DIVERGING_MODULE).attribute if a.name == "eps"]
    eps.f = 0.1
    onnx.save(proto, tmp_path / "faulty.onnx")
    factory = tmp_path / "models.py"
    factory.write_text(FACTORY_SOURCE)
    json_path, png_path = tmp_path / "report.json", tmp_path / "layers.png"

    options = ["--onnx", str(tmp_path / "faulty.onnx"), "--levels", "disable_all", "--draws", "1"]
    outputs = ["--json", str(json_path), "--plot", str(png_path)]
    result = subprocess.run(
        [sys.executable, "-m", "opbridge", "verify", f"{factory}:make", *options, *outputs],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 1, result.stderr[-2000:]
    assert "opbridge verify: FAIL" in result.stdout
    assert f"first divergence: {DIVERGING_MODULE}" in result.stdout
    data = json.loads(json_path.read_text())
    assert data["passed"] is False and data["first_divergence"] == DIVERGING_MODULE
    assert data["failures"] and data["outputs"][0]["passed"] is False
    import matplotlib.pyplot as plt

    image = plt.imread(png_path)
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
