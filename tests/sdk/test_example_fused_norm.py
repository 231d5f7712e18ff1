"""examples/fused_norm: the articles' operator as an out-of-tree project on
the installed SDK — built, tested, exported, verified, and run from the C++
host (examples/cpp/run_model.cpp)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from paths import ROOT
from user_project import (
    PYTHON,
    installed,
    passes_its_tests_and_verifies,
    run,
    runs_on_both_torch_libraries,
)

EXAMPLE = ROOT / "examples" / "fused_norm"
BUILD_DIR = Path(os.environ.get("OPBRIDGE_BUILD_DIR", ROOT / "build" / "py"))

EXPORT = """
import sys, numpy as np, torch, opbridge
sys.path.insert(0, sys.argv[1])
from example import make
import my_fused_ops
model, (x,) = make()
opbridge.export.export(model, (x,), sys.argv[2] + "/model.onnx", route="custom")
x.numpy().astype(np.float32).tofile(sys.argv[2] + "/in.bin")
with torch.no_grad():
    model(x).numpy().astype(np.float32).tofile(sys.argv[2] + "/expected.bin")
print(my_fused_ops.LIBRARY.adapter_path("ort"))
print(" ".join(map(str, x.shape)))
"""


def test_fused_norm_example_builds_tests_exports_verifies_and_runs_in_cpp(tmp_path):
    with installed(EXAMPLE, "my_fused_ops"):
        passes_its_tests_and_verifies(EXAMPLE, EXAMPLE / "example.py")
        runs_on_both_torch_libraries("my_fused_ops")
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


def test_fast_kernels_guide_shows_the_real_kernels():
    """Every C++ block of docs/guides/fast-kernels.md is a verbatim part of
    a kernel that is built and tested: the scaffold's (as `opbridge new-op
    --name soft_cap` renders it), swiglu_clamp's, softmax_lse's, gated_rope's
    and pairwise_dot's here, bias_gelu's, rms_norm's or the toolkit test
    library's (tests/sdk/faulty_ops)."""
    import re

    from opbridge.sdk import scaffold

    kernels = [
        scaffold.files("soft_cap", "soft_cap_ops", "com.example.soft_cap_ops")[
            "csrc/soft_cap/kernel.cpp"
        ],
        (EXAMPLE / "csrc" / "swiglu_clamp" / "kernel.cpp").read_text(),
        (EXAMPLE / "csrc" / "softmax_lse" / "kernel.cpp").read_text(),
        (EXAMPLE / "csrc" / "softmax_lse" / "spec.h").read_text(),
        (EXAMPLE / "csrc" / "gated_rope" / "kernel.cpp").read_text(),
        (EXAMPLE / "csrc" / "pairwise_dot" / "kernel.cpp").read_text(),
        (ROOT / "csrc" / "ops" / "bias_gelu" / "kernel.cpp").read_text(),
        (ROOT / "csrc" / "ops" / "rms_norm" / "kernel.cpp").read_text(),
        (ROOT / "tests" / "sdk" / "faulty_ops" / "toolkit_faulty.cpp").read_text(),
    ]
    guide = (ROOT / "docs" / "guides" / "fast-kernels.md").read_text()
    snippets = re.findall(r"^```cpp\n(.*?)^```$", guide, re.MULTILINE | re.DOTALL)
    assert len(snippets) >= 13
    for snippet in snippets:
        assert any(snippet in kernel for kernel in kernels), snippet


def test_the_fast_kernels_guide_names_the_highway_release_the_sdk_compiles_against():
    """The guide states the Highway release of the headers the builds use
    (Debian's libhwy-dev): a kernel written to a later release's API does not
    compile here."""
    import re

    header = Path("/usr/include/hwy/highway.h").read_text()
    version = ".".join(
        re.search(rf"#define HWY_{part} (\d+)", header).group(1)
        for part in ("MAJOR", "MINOR", "PATCH")
    )
    guide = (ROOT / "docs" / "guides" / "fast-kernels.md").read_text()
    assert f"Highway {version} (Debian" in guide, version
