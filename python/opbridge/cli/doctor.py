"""``opbridge doctor``: which builds are loaded, and whether they fit together."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import sys

from opbridge.cli.common import FactoryError, add_import_argument, import_modules
from opbridge.runtimes.base import RuntimeCheck as Check
from opbridge.runtimes.base import loaded_libraries

__all__ = ["Check", "diagnose"]

HELP = "print versions, build facts and loaded libraries; check that they fit together"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def diagnose() -> tuple[list[tuple[str, str]], list[Check]]:
    facts: list[tuple[str, str]] = [
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", f"{platform.system()} {platform.machine()}"),
    ]
    for package in ("torch", "onnx", "onnxscript", "numpy"):
        facts.append((package, _version(package)))
    checks: list[Check] = []
    try:
        import torch

        from opbridge._library import BUILTIN
    except ImportError as error:
        checks.append(Check("native extension loads", False, str(error)))
        return facts, checks

    import opbridge
    from opbridge import runtimes

    # What opbridge's own extension module was built with.
    native = BUILTIN.module
    facts += [
        ("opbridge", f"{opbridge.__version__} (domain opbridge v{opbridge.ONNX_DOMAIN_VERSION})"),
        ("compiler", native.BUILD_COMPILER),
        (
            "C++ ABI (_GLIBCXX_USE_CXX11_ABI)",
            f"opbridge {int(native.BUILD_CXX11_ABI)}, torch {int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        ),
        ("built against torch", native.BUILD_TORCH_VERSION),
        ("extension", native.__file__),
        ("OPBRIDGE_CHECK", "on" if native.runtime_checks_enabled() else "off"),
        ("torch threads", str(torch.get_num_threads())),
    ]
    simd = getattr(native, "simd_target", None)
    facts.append(("SIMD target (run time)", simd() if callable(simd) else "scalar build"))

    checks.append(Check("native extension loads", True, native.__file__))
    adapter = opbridge.libraries()[0].torch_adapter
    loaded = f"{adapter.library.name} ({adapter.kind} ABI): {adapter.reason}"
    facts.append(("PyTorch library", loaded))
    if getattr(native, "STABLE_ABI", False):
        # A stable-ABI build runs on every torch from its target version on.
        target = native.TORCH_TARGET_VERSION
        running = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
        checks.append(
            Check(
                "torch is at least the stable ABI's target",
                running >= tuple(int(part) for part in target.split(".")),
                f"built against {native.BUILD_TORCH_VERSION} for torch >= {target} (stable ABI), "
                f"running {torch.__version__}",
            )
        )
    else:
        checks.append(
            Check(
                "torch matches the build",
                torch.__version__.split("+")[0].split(".")[:2]
                == native.BUILD_TORCH_VERSION.split("+")[0].split(".")[:2],
                f"built against {native.BUILD_TORCH_VERSION}, running {torch.__version__}",
            )
        )
    checks.append(
        Check(
            "C++ ABI matches torch",
            bool(native.BUILD_CXX11_ABI) == bool(torch._C._GLIBCXX_USE_CXX11_ABI),
            "same _GLIBCXX_USE_CXX11_ABI",
        )
    )
    for runtime in (runtimes.get(name) for name in runtimes.names()):
        facts += runtime.facts()
        checks += runtime.checks()
    # opbridge's, torch's and every runtime's (each runtime's package is named
    # after it).
    libraries = loaded_libraries(("opbridge", "libtorch", "libc10", *runtimes.names()))
    facts.append(("libraries loaded", "\n    " + "\n    ".join(libraries)))
    return facts, checks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_import_argument(parser)


def run(args: argparse.Namespace) -> int:
    try:
        import_modules(getattr(args, "imports", []))
    except FactoryError as error:
        print(f"opbridge doctor: {error}", file=sys.stderr)
        return 2
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
