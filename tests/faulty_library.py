"""The faulty_ops test library (tests/sdk/faulty_ops): one JIT build, cached
by content under build/test-jit, shared by the tests that need a user's
library already built (tests/sdk/test_faulty_ops.py, tests/deploy/test_aoti.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from opbridge.sdk.build import _sdk_digest

from paths import ROOT

SOURCES = sorted((ROOT / "tests" / "sdk" / "faulty_ops").glob("*.cpp"))


def sdk_digest() -> str:
    """The installed SDK's sources and CMake package: a build of faulty_ops
    with another SDK is another cache entry."""
    return _sdk_digest()[:16]


def build() -> Path:
    """The faulty_ops extension module's file, built (or reused) in a process
    of its own; its PyTorch library, libfaulty_ops_torch.so, lies beside it."""
    root = ROOT / "build" / "test-jit" / sdk_digest()
    for stale in root.parent.glob("*"):  # builds with an SDK since changed
        if stale != root:
            shutil.rmtree(stale, ignore_errors=True)
    code = f"""
        import opbridge.sdk.build
        library = opbridge.sdk.build.load(
            "faulty_ops", {[str(s) for s in SOURCES]!r}, onnx_domain="com.example.faulty",
            adapters=["torch", "ort", "openvino", "executorch"], build_directory={str(root)!r})
        print(library.path)
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"exit status {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return Path(result.stdout.strip().splitlines()[-1])


def register_card_code(standard: str) -> str:
    """Python source that registers a card for faulty_ops::short_gradient
    whose standard form is ``standard`` (an expression in ``b`` and ``x``),
    for a script that has loaded the library: the function route's body."""
    return textwrap.dedent(
        f"""
        def _samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
            yield opbridge.ops.Sample((torch.randn(4, 8, dtype=dtype),), label="4x8")


        opbridge.ops.register_card(
            opbridge.ops.Card(
                name="short_gradient",
                namespace="faulty_ops",
                call=torch.ops.faulty_ops.short_gradient,
                standard=lambda b, x: {standard},
                reference=lambda x: x,
                samples=_samples,
                bench_inputs=lambda shape, dtype, requires_grad=False: (torch.randn(*shape),),
            )
        )
        """
    )
