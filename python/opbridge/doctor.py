"""``opbridge doctor``: which builds are loaded, and whether they fit together."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import sys
from dataclasses import dataclass

HELP = "print versions, build facts and loaded libraries; check that they fit together"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _loaded_libraries() -> list[str]:
    """Shared objects of torch, ONNX Runtime and opbridge mapped into this process."""
    keys = ("opbridge", "onnxruntime", "libtorch", "libc10")
    found = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if path.startswith("/") and ".so" in path and any(k in path for k in keys):
                    found.add(path)
    except OSError:
        return []
    return sorted(found)


def _smoke_session() -> tuple[float, list[str]]:
    """Runs a one-node custom-route model through the library; returns the max
    error and the libraries mapped while the session is alive."""
    import numpy as np
    import torch
    from onnx import TensorProto, helper

    import opbridge

    node = helper.make_node("RmsNorm", ["x", "w"], ["y"], domain="opbridge", eps=1e-6)
    graph = helper.make_graph(
        [node],
        "doctor",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("opbridge", 1)],
        ir_version=10,
    )
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    session = opbridge.ort.InferenceSession(model)
    (got,) = session.run(None, {"x": x, "w": w})
    expected = opbridge.rms_norm(torch.from_numpy(x), torch.from_numpy(w)).numpy()
    return float(np.abs(got - expected).max()), _loaded_libraries()


def _release(version: str) -> tuple[int, ...]:
    """ "1.24.1" -> (1, 24, 1); stops at the first part that is not a number."""
    parts = []
    for part in version.split("+")[0].split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def ort_supported_range(module) -> tuple[str, str]:
    """The ONNX Runtime releases the built library supports, as the build says
    (kOrtApiFloor and kOrtNewestTested in csrc/opbridge/version.h): the floor
    ("1.24") and the newest release tested."""
    return f"1.{module.ORT_API_FLOOR}", module.ORT_NEWEST_TESTED


def ort_version_check(version: str, module) -> Check:
    """Whether an ONNX Runtime of this version can run the built library."""
    floor, newest = ort_supported_range(module)
    release = _release(version)
    ok = release[:2] >= _release(floor)
    if not ok:
        detail = f"onnxruntime {version} is older than {floor}: the library refuses it"
    elif release > _release(newest):
        detail = f"onnxruntime {version} (newer than the newest tested, {newest})"
    else:
        detail = f"onnxruntime {version}"
    return Check(f"ONNX Runtime is {floor} or newer (C API {module.ORT_API_FLOOR})", ok, detail)


def diagnose() -> tuple[list[tuple[str, str]], list[Check]]:
    facts: list[tuple[str, str]] = [
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", f"{platform.system()} {platform.machine()}"),
    ]
    for package in ("torch", "onnx", "onnxruntime", "onnxscript", "numpy"):
        facts.append((package, _version(package)))
    checks: list[Check] = []
    try:
        import torch

        from opbridge._library import _C
    except ImportError as error:
        checks.append(Check("native extension loads", False, str(error)))
        return facts, checks

    import onnxruntime

    import opbridge

    facts += [
        ("opbridge", f"{opbridge.__version__} (domain opbridge v{opbridge.ONNX_DOMAIN_VERSION})"),
        ("compiler", _C.BUILD_COMPILER),
        (
            "C++ ABI (_GLIBCXX_USE_CXX11_ABI)",
            f"opbridge {int(_C.BUILD_CXX11_ABI)}, torch {int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        ),
        ("built against torch", _C.BUILD_TORCH_VERSION),
        ("extension", _C.__file__),
        ("ONNX Runtime library", opbridge.ort.get_library_path()),
        ("OPBRIDGE_CHECK", "on" if _C.runtime_checks_enabled() else "off"),
        ("torch threads", str(torch.get_num_threads())),
    ]
    simd = getattr(_C, "simd_target", None)
    facts.append(("SIMD target (run time)", simd() if callable(simd) else "scalar build"))

    checks.append(Check("native extension loads", True, _C.__file__))
    checks.append(
        Check(
            "torch matches the build",
            torch.__version__ == _C.BUILD_TORCH_VERSION,
            f"built against {_C.BUILD_TORCH_VERSION}, running {torch.__version__}",
        )
    )
    checks.append(
        Check(
            "C++ ABI matches torch",
            bool(_C.BUILD_CXX11_ABI) == bool(torch._C._GLIBCXX_USE_CXX11_ABI),
            "same _GLIBCXX_USE_CXX11_ABI",
        )
    )
    floor, newest = ort_supported_range(_C)
    facts.append(("supported ONNX Runtime", f"{floor} (oldest) to {newest} (newest tested)"))
    checks.append(ort_version_check(onnxruntime.__version__, _C))
    libraries = _loaded_libraries()
    try:
        error, libraries = _smoke_session()
        checks.append(
            Check("ONNX Runtime runs opbridge::RmsNorm", error <= 1e-5, f"max abs err {error:.2e}")
        )
    except Exception as failure:
        checks.append(Check("ONNX Runtime runs opbridge::RmsNorm", False, str(failure)))
    facts.append(("libraries loaded", "\n    " + "\n    ".join(libraries)))
    return facts, checks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace) -> int:
    del args
    facts, checks = diagnose()
    width = max(len(name) for name, _ in facts)
    for name, value in facts:
        print(f"{name:<{width}}  {value}")
    print()
    for check in checks:
        print(f"[{'ok' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
    failed = [c for c in checks if not c.ok]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(argparse.Namespace()))
