"""opbridge.deploy.quantize: ONNX Runtime's int8 quantizer on models with opbridge
nodes, and the data-set accuracy report."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

import opbridge
from opbridge.demo.models import build_llama_block, build_vision
from opbridge.deploy.quantize import dataset_report, load_samples, quantize


def _export(build, route, path):
    model, args = build()
    proto = opbridge.export.export(model, args, route=route, dynamic_batch=True, verbose=False)
    onnx.save(proto, path)
    return model, args, proto.graph.input[0].name


def _draws(args, count, seed):
    g = torch.Generator().manual_seed(seed)
    x = args[0]
    if x.dtype == torch.uint8:
        return [
            torch.randint(0, 256, x.shape, generator=g, dtype=torch.uint8) for _ in range(count)
        ]
    return [torch.randn(x.shape, generator=g) for _ in range(count)]


def test_onnx_runtimes_own_calibrator_fails_on_a_custom_route_model(tmp_path):
    """Why opbridge.deploy.quantize exists: ONNX Runtime's calibrator opens a bare session."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    _, args, name = _export(build_llama_block, "custom", tmp_path / "m.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter([{name: args[0].numpy()}])

        def get_next(self):
            return next(self.samples, None)

    with pytest.raises(Exception, match="opbridge"):
        quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", Reader())


@pytest.mark.parametrize("route", ["custom", "standard"])
def test_static_quantization_keeps_library_nodes_float_and_stays_accurate(tmp_path, route):
    from onnxruntime.quantization import calibrate

    original = calibrate.CalibraterBase.create_inference_session
    model, args, name = _export(build_llama_block, route, tmp_path / "m.onnx")
    calibration = [{name: x.numpy()} for x in _draws(args, 8, seed=1)]
    result = quantize(tmp_path / "m.onnx", tmp_path / "q.onnx", calibration)
    assert calibrate.CalibraterBase.create_inference_session is original
    assert result.calibration_samples == 8
    assert result.node_types["ai.onnx::QuantizeLinear"] > 0
    assert result.node_types["ai.onnx::DequantizeLinear"] > 0
    if route == "custom":
        assert result.library_nodes == 5  # rms_norm, 2 rotary, add_rms_norm, bias_gelu
        assert result.node_types["opbridge::RotaryEmbedding"] == 2
    else:
        assert result.library_nodes == 0
    data = [{name: x.numpy()} for x in _draws(args, 16, seed=2)]
    report = dataset_report(tmp_path / "q.onnx", model, data)
    summary = report.summary()
    assert summary["samples"] == 16
    assert summary["cosine"]["min"] > 0.98
    assert 0 < summary["max_abs_err"]["p50"] <= summary["max_abs_err"]["p100"] < 5
    worst = report.worst_samples()
    assert [w.max_abs_err for w in worst] == sorted((w.max_abs_err for w in worst), reverse=True)
    # The float model agrees to float32 rounding: the report measures quantization.
    exact = dataset_report(tmp_path / "m.onnx", model, data)
    assert exact.summary()["max_abs_err"]["p100"] < 1e-5


def test_dynamic_quantization_of_the_vision_model(tmp_path):
    """Its Gemm (weight rewritten to MatMul by the quantizer) once failed
    shape inference on the exporter's stale value_info."""
    model, args, name = _export(build_vision, "custom", tmp_path / "m.onnx")
    result = quantize(tmp_path / "m.onnx", tmp_path / "q.onnx", mode="dynamic")
    assert result.mode == "dynamic" and result.library_nodes == 3
    assert any("Integer" in t or "DynamicQuantize" in t for t in result.node_types)
    data = [{name: x.numpy()} for x in _draws(args, 8, seed=3)]
    report = dataset_report(tmp_path / "q.onnx", model, data)
    assert report.summary()["cosine"]["min"] > 0.99
    report.plot(tmp_path / "hist.png")
    assert (tmp_path / "hist.png").stat().st_size > 1000
    assert json.loads(report.to_json())["summary"]["samples"] == 8


def test_calibration_data_from_npz_and_its_errors(tmp_path):
    np.savez(tmp_path / "ok.npz", x=np.zeros((3, 2, 4), np.float32))
    samples = load_samples(tmp_path / "ok.npz", ["x"])
    assert len(samples) == 3 and samples[0]["x"].shape == (2, 4)
    with pytest.raises(ValueError, match=r"lacks arrays for inputs \['y'\]"):
        load_samples(tmp_path / "ok.npz", ["x", "y"])
    np.savez(tmp_path / "uneven.npz", x=np.zeros((3, 4)), y=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="different sample counts"):
        load_samples(tmp_path / "uneven.npz", ["x", "y"])
    with pytest.raises(ValueError, match="has 2 tensors, the model takes 1"):
        load_samples([(np.zeros(2), np.zeros(2))], ["x"])
    with pytest.raises(ValueError, match="needs calibration data"):
        quantize(tmp_path / "none.onnx", tmp_path / "q.onnx")


def test_quantize_command_with_a_data_set_report(tmp_path, capsys):
    from opbridge.__main__ import main

    _, args, name = _export(build_llama_block, "custom", tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", **{name: np.stack([x.numpy() for x in _draws(args, 4, 5)])})
    np.savez(tmp_path / "data.npz", **{name: np.stack([x.numpy() for x in _draws(args, 6, 6)])})
    factory = tmp_path / "make.py"
    factory.write_text(
        "from opbridge.demo.models import build_llama_block\n\n\n"
        "def make():\n    return build_llama_block()\n"
    )
    status = main(
        [
            "quantize",
            str(tmp_path / "m.onnx"),
            str(tmp_path / "q.onnx"),
            "--calibration",
            str(tmp_path / "calib.npz"),
            "--dataset",
            str(tmp_path / "data.npz"),
            "--torch-model",
            f"{factory}:make",
            "--plot",
            str(tmp_path / "h.png"),
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "5 library nodes left in float" in printed and "6 samples" in printed
    assert (tmp_path / "h.png").exists()
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["samples"] == 6


def _vision_batch_of_four(tmp_path):
    """The vision model exported with a fixed input of [4, 32, 32, 3]."""
    model, args = build_vision(batch=4, size=32)
    proto = opbridge.export.export(model, args, route="custom", dynamic_batch=False, verbose=False)
    onnx.save(proto, tmp_path / "m.onnx")
    value = proto.graph.input[0]
    assert [d.dim_value for d in value.type.tensor_type.shape.dim] == [4, 32, 32, 3]
    return model, value.name


def test_images_stacked_along_the_batch_axis_are_cut_into_batches(tmp_path, capsys):
    from opbridge.__main__ import main

    model, name = _vision_batch_of_four(tmp_path)
    images = np.random.default_rng(7).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
    np.savez(tmp_path / "images.npz", **{name: images})
    samples = load_samples(tmp_path / "images.npz", [name], {name: [4, 32, 32, 3]})
    assert len(samples) == 4 and all(s[name].shape == (4, 32, 32, 3) for s in samples)
    np.testing.assert_array_equal(samples[1][name], images[4:8])
    factory = tmp_path / "make.py"
    factory.write_text(
        "from opbridge.demo.models import build_vision\n\n\n"
        "def make():\n    return build_vision(batch=4, size=32)\n"
    )
    command = ["quantize", str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx")]
    command += ["--calibration", str(tmp_path / "images.npz")]
    status = main(
        [*command, "--dataset", str(tmp_path / "images.npz"), "--torch-model", f"{factory}:make"]
    )
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "4 calibration samples" in printed and "3 library nodes left in float" in printed
    assert "4 samples, ONNX Runtime vs PyTorch" in printed
    report = dataset_report(tmp_path / "q.onnx", model, samples)
    assert report.summary()["samples"] == 4 and report.summary()["cosine"]["min"] > 0.9
    # A data set the model cannot take is refused by the command, naming it.
    np.savez(tmp_path / "ten.npz", **{name: images[:10]})
    status = main(
        [*command, "--dataset", str(tmp_path / "ten.npz"), "--torch-model", f"{factory}:make"]
    )
    error = capsys.readouterr().err
    assert status == 2
    assert f"--dataset: opbridge.deploy.quantize: {tmp_path / 'ten.npz'}: array {name!r}" in error
    assert "its 10 rows along axis 0 are not a multiple of the batch size 4" in error


def test_npz_arrays_of_another_shape_are_refused_with_the_shapes_expected(tmp_path):
    _, name = _vision_batch_of_four(tmp_path)
    model_input = f"the model's input {name!r} is [4, 32, 32, 3]"
    expected = (
        "expected [N, 4, 32, 32, 3] (samples stacked on a new first axis) or "
        "[4*k, 32, 32, 3] (batches of 4 along axis 0)"
    )
    path = tmp_path / "flat.npz"
    np.savez(path, **{name: np.zeros((16, 32, 32), np.uint8)})
    with pytest.raises(ValueError) as info:
        quantize(tmp_path / "m.onnx", tmp_path / "q.onnx", path)
    assert str(info.value) == (
        f"opbridge.deploy.quantize: {path}: array {name!r} has shape [16, 32, 32]; {model_input}: "
        f"{expected}"
    )
    path = tmp_path / "ten.npz"
    np.savez(path, **{name: np.zeros((10, 32, 32, 3), np.uint8)})
    with pytest.raises(ValueError) as info:
        quantize(tmp_path / "m.onnx", tmp_path / "q.onnx", path)
    assert str(info.value) == (
        f"opbridge.deploy.quantize: {path}: array {name!r} has shape [10, 32, 32, 3]; "
        f"{model_input}: "
        f"its 10 rows along axis 0 are not a multiple of the batch size 4; {expected}"
    )
    path = tmp_path / "channels.npz"
    np.savez(path, **{name: np.zeros((2, 4, 32, 32, 4), np.uint8)})
    with pytest.raises(ValueError) as info:
        quantize(tmp_path / "m.onnx", tmp_path / "q.onnx", path)
    assert f"array {name!r} has shape [2, 4, 32, 32, 4]; {model_input}: {expected}" in str(
        info.value
    )


def test_npz_samples_by_the_models_input_shapes(tmp_path):
    np.savez(tmp_path / "stacked.npz", x=np.arange(3 * 4 * 2).reshape(3, 4, 2))
    samples = load_samples(tmp_path / "stacked.npz", ["x"], {"x": [4, 2]})
    assert [s["x"].shape for s in samples] == [(4, 2)] * 3
    # A dynamic first dimension: one row per batch.
    np.savez(tmp_path / "rows.npz", x=np.arange(5 * 2).reshape(5, 2))
    samples = load_samples(tmp_path / "rows.npz", ["x"], {"x": ["batch", 2]})
    assert [s["x"].tolist() for s in samples] == [[[2 * i, 2 * i + 1]] for i in range(5)]
    with pytest.raises(ValueError) as info:
        load_samples(tmp_path / "rows.npz", ["x"], {"x": ["batch", 3]})
    assert str(info.value) == (
        f"opbridge.deploy.quantize: {tmp_path / 'rows.npz'}: array 'x' has shape [5, 2]; the "
        "model's "
        "input 'x' is [batch, 3]: expected [N, batch, 3] (samples stacked on a new first axis) "
        "or [M, 3] (batches of 1 row each along axis 0)"
    )
    # Inputs of unknown shape keep the first axis as the sample axis.
    assert len(load_samples(tmp_path / "rows.npz", ["x"], {"x": None})) == 5
    # The counts are compared after cutting batches.
    np.savez(tmp_path / "two.npz", x=np.zeros((8, 3)), y=np.zeros((3, 4, 3)))
    with pytest.raises(ValueError, match=r"different sample counts per input: \{'x': 2, 'y': 3\}"):
        load_samples(tmp_path / "two.npz", ["x", "y"], {"x": [4, 3], "y": [4, 3]})
    np.savez(tmp_path / "two.npz", x=np.zeros((8, 3)), y=np.zeros((2, 4, 3)))
    samples = load_samples(tmp_path / "two.npz", ["x", "y"], {"x": [4, 3], "y": [4, 3]})
    assert len(samples) == 2 and samples[0]["x"].shape == samples[0]["y"].shape == (4, 3)
