"""Drives the sanitizer build (AddressSanitizer + UBSan) of the ONNX Runtime
library through the C++ host: good models must match PyTorch, bad ones must
fail with a message, and no run may report a sanitizer error.

    python scripts/sanitizer_smoke.py BUILD_DIR
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import opbridge
from opbridge.demo import build_demo


def _single(op_type, attrs, x_shape, initializers=()):
    inits = [numpy_helper.from_array(a, name) for name, a in initializers]
    node = helper.make_node(
        op_type,
        ["x", *[n for n, _ in initializers]],
        ["y"],
        domain="opbridge",
        name="smoke",
        **attrs,
    )
    graph = helper.make_graph(
        [node],
        "smoke",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(
        graph,
        ir_version=10,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("opbridge", 1)],
    )


def main(build_dir: Path) -> int:
    runner = build_dir / "opbridge_ort_runner"
    library = build_dir / "libopbridge_ort.so"
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=86"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=86"
    env["LSAN_OPTIONS"] = f"suppressions={Path(__file__).with_name('lsan.supp')}"
    work = Path(tempfile.mkdtemp(prefix="opbridge_asan_"))
    model, (x,) = build_demo(batch=2, seq=8)
    rng = np.random.default_rng(0)
    w = rng.standard_normal(16).astype(np.float32)
    cases = [
        (
            "demo, custom route",
            opbridge.export.export(model, (x,), route="custom"),
            x.numpy(),
            lambda a: model(torch.from_numpy(a)).detach().numpy(),
        ),
        (
            "rms_norm, bias",
            _single("RmsNorm", {"eps": 1e-5}, [3, 16], [("w", w), ("b", w)]),
            rng.standard_normal((3, 16)).astype(np.float32),
            lambda a: opbridge.rms_norm(
                torch.from_numpy(a), torch.from_numpy(w), torch.from_numpy(w), 1e-5
            ).numpy(),
        ),
        (
            "rms_norm, zero rows",
            _single("RmsNorm", {"eps": 1e-5}, [0, 16], [("w", w)]),
            np.zeros((0, 16), np.float32),
            lambda a: a,
        ),
        (
            "scaled_clamp, long row",
            _single("ScaledClamp", {"scale": 2.0, "min_val": -1.0, "max_val": 1.0}, [1, 70001]),
            rng.standard_normal((1, 70001)).astype(np.float32),
            lambda a: opbridge.scaled_clamp(torch.from_numpy(a), 2.0, -1.0, 1.0).numpy(),
        ),
        (
            "scaled_clamp, min_val and max_val left at their defaults",
            _single("ScaledClamp", {"scale": 2.0}, [3, 7]),
            4 * rng.standard_normal((3, 7)).astype(np.float32),
            lambda a: np.clip(a * 2.0, 0.0, 6.0),
        ),
        (
            "missing attribute",
            _single("ScaledClamp", {"min_val": 0.0}, [4]),
            np.ones(4, np.float32),
            None,
        ),
        (
            "weight of the wrong length",
            _single("RmsNorm", {"eps": 1e-5}, [2, 8], [("w", w)]),
            np.ones((2, 8), np.float32),
            None,
        ),
    ]
    failures = 0
    for name, proto, feed, reference in cases:
        path, inp, out = work / "m.onnx", work / "in.bin", work / "out.bin"
        onnx.save(proto, path)
        feed.astype(np.float32).tofile(inp)
        result = subprocess.run(
            [str(runner), str(path), str(library), str(inp), str(out), *map(str, feed.shape)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=300,
        )
        sanitizer = "Sanitizer" in result.stderr or "runtime error:" in result.stderr
        if reference is None:
            ok = result.returncode == 1 and "opbridge" in result.stderr and not sanitizer
            errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
            detail = errors[-1] if errors else "no error message"
        else:
            ok = result.returncode == 0 and not sanitizer
            detail = f"exit {result.returncode}"
            if ok:
                got = np.fromfile(out, dtype=np.float32).reshape(feed.shape)
                error = float(np.abs(got - reference(feed)).max()) if got.size else 0.0
                ok = error <= 1e-5
                detail = f"max abs err {error:.2e}"
        failures += not ok
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}")
        if not ok:
            print(result.stderr[-4000:])
    print(f"sanitizer smoke: {len(cases) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
