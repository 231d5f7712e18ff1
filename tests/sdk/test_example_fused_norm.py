"""examples/fused_norm: the articles' operator as an out-of-tree project on
the installed SDK — built, tested, exported, verified, and run from the C++
host (examples/cpp/run_model.cpp)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from paths import ROOT
from user_project import PYTHON, installed, passes_its_tests_and_verifies, run

EXAMPLE = ROOT / "examples" / "fused_norm"
BUILD_DIR = Path(os.environ.get("OPBRIDGE_BUILD_DIR", ROOT / "build" / "py"))

EXPORT = """
import sys, numpy as np, torch, opbridge
sys.path.insert(0, sys.argv[1])
from example import make
import my_fused_ops
model, (x,) = make()
opbridge.onnx.export(model, (x,), sys.argv[2] + "/model.onnx", route="custom")
x.numpy().astype(np.float32).tofile(sys.argv[2] + "/in.bin")
with torch.no_grad():
    model(x).numpy().astype(np.float32).tofile(sys.argv[2] + "/expected.bin")
print(my_fused_ops.LIBRARY.ort_library_path)
print(" ".join(map(str, x.shape)))
"""


def test_fused_norm_example_builds_tests_exports_verifies_and_runs_in_cpp(tmp_path):
    with installed(EXAMPLE, "my_fused_ops"):
        passes_its_tests_and_verifies(EXAMPLE, EXAMPLE / "example.py")
        library, shape = run(PYTHON, "-c", EXPORT, str(EXAMPLE), str(tmp_path)).split("\n")[-3:-1]
        runner = BUILD_DIR / "opbridge_ort_runner"
        assert runner.is_file(), f"{runner} is not built; run ./dev setup"
        run(
            str(runner),
            str(tmp_path / "model.onnx"),
            library,
            str(tmp_path / "in.bin"),
            str(tmp_path / "out.bin"),
            *shape.split(),
        )
        got = np.fromfile(tmp_path / "out.bin", dtype=np.float32)
        expected = np.fromfile(tmp_path / "expected.bin", dtype=np.float32)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
