"""The main job: the demo exports, runs and reports."""

from __future__ import annotations

import subprocess
import sys

import onnx

import opbridge


def test_demo_cli(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "opbridge", "demo", "--out", str(tmp_path), "--runs", "3"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert out.count("| ORT, custom route") == 2 and out.count("| ORT, standard route") == 2
    assert "agreement: PASS" in out
    # opbridge.verify ran on both routes' models and found nothing.
    verify_rows = [line for line in out.splitlines() if line.startswith("| verify, ")]
    assert [row.split("|")[1].strip() for row in verify_rows] == [
        "verify, custom route",
        "verify, standard route",
    ]
    for row in verify_rows:
        _, _, result, max_abs_err, modules, first_divergence, _ = row.split("|")
        assert result.strip() == "PASS"
        assert float(max_abs_err) <= 1e-5
        assert int(modules) == 11
        assert first_divergence.strip() == "-"
    # The Hugging Face part: a LlamaForCausalLM patched in one call, both
    # routes verified against the unpatched model.
    assert "`opbridge.patch(model)`: 9 modules replaced" in out
    for route in ("custom", "standard"):
        assert f"| LlamaForCausalLM, {route} route | PASS | - |" in out
    hf_custom = onnx.load(tmp_path / "hf_llama_patched_custom.onnx")
    assert {n.op_type for n in hf_custom.graph.node if n.domain == "opbridge"} == {
        "RmsNorm",
        "AddRmsNorm",
        "RotaryEmbedding",
    }
    custom = onnx.load(tmp_path / "demo_custom.onnx")
    standard = onnx.load(tmp_path / "demo_standard.onnx")
    assert sum(n.domain == "opbridge" for n in custom.graph.node) == 5
    assert not any(n.domain == "opbridge" for n in standard.graph.node)
    for model in (custom, standard):
        assert {p.key: p.value for p in model.metadata_props}[
            "opbridge.version"
        ] == opbridge.__version__
