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
    custom = onnx.load(tmp_path / "demo_custom.onnx")
    standard = onnx.load(tmp_path / "demo_standard.onnx")
    assert sum(n.domain == "opbridge" for n in custom.graph.node) == 5
    assert not any(n.domain == "opbridge" for n in standard.graph.node)
    for model in (custom, standard):
        assert {p.key: p.value for p in model.metadata_props}[
            "opbridge.version"
        ] == opbridge.__version__
