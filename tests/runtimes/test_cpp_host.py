"""The library from a C++ host program (examples/cpp/run_model.cpp)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import torch

import opbridge
from opbridge.demo import build_demo

from paths import ROOT

BUILD_DIR = Path(os.environ.get("OPBRIDGE_BUILD_DIR", ROOT / "build" / "py"))


def test_cpp_host_runs_custom_route_model(tmp_path):
    runner = BUILD_DIR / "opbridge_ort_runner"
    assert runner.is_file(), f"{runner} is not built; run ./dev setup"
    model, (x,) = build_demo(batch=2, seq=8)
    path = tmp_path / "demo.onnx"
    opbridge.onnx.export(model, (x,), path, route="custom")
    x.numpy().astype(np.float32).tofile(tmp_path / "in.bin")
    result = subprocess.run(
        [
            str(runner),
            str(path),
            opbridge.ort.get_library_path(),
            str(tmp_path / "in.bin"),
            str(tmp_path / "out.bin"),
            *map(str, x.shape),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    got = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(x.shape)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
