"""opbridge.quantize: ONNX Runtime's int8 quantizer on models with opbridge
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
    proto = opbridge.onnx.export(model, args, route=route, dynamic_batch=True, verbose=False)
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
    """Why opbridge.quantize exists: ONNX Runtime's calibrator opens a bare session."""
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
