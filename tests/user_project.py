"""Installing and running a user's operator project (an out-of-tree package
built on the SDK) from the tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

PYTHON = sys.executable


def run(*command, cwd=None) -> str:
    """Runs a command; its stdout, or an assertion with its output on failure."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


@contextlib.contextmanager
def installed(project: Path, distribution: str):
    """``pip install --no-build-isolation -e project`` for the block's duration.

    One such block at a time per environment: pytest-xdist workers share it,
    and pip does not guard site-packages against a concurrent pip."""
    with (
        FileLock(str(Path(sys.prefix) / ".opbridge-tests-pip.lock")),
        _installed(project, distribution),
    ):
        yield


@contextlib.contextmanager
def _installed(project: Path, distribution: str):
    run(
        PYTHON,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-build-isolation",
        "--no-deps",
        "-e",
        str(project),
    )
    try:
        yield
    finally:
        subprocess.run([PYTHON, "-m", "pip", "uninstall", "-q", "-y", distribution], check=False)


def passes_its_tests_and_verifies(project: Path, example: Path) -> None:
    """The project's own tests pass, none skipped (each other runtime's among
    them: OpenVINO is installed here), and ``opbridge verify`` passes the
    example's model by both routes."""
    out = run(PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=project)
    assert " passed" in out and "skipped" not in out, out[-2000:]
    for route in ("custom", "standard"):
        out = run(PYTHON, "-m", "opbridge", "verify", f"{example}:make", "--route", route)
        assert "PASS" in out, out


def runs_on_both_torch_libraries(package: str) -> None:
    """The package's library was built with both PyTorch libraries: the
    default one loads under this torch, and under OPBRIDGE_TORCH_ADAPTER=stable
    its stable-ABI one needs torch's stable C API only and passes
    ``opbridge check-op`` (the SDK's checks of each of its ops)."""
    stable = {**os.environ, "OPBRIDGE_TORCH_ADAPTER": "stable"}
    code = f"""
from opbridge.sdk import abi

import {package} as package

library = package.LIBRARY
adapter = library.torch_adapter
assert adapter.kind == "stable", adapter
assert [p.name for p in adapter.available] == [
    f"lib{{library.name}}_torch.so", f"lib{{library.name}}_torch_stable.so"
], adapter.available
assert abi.stable_abi_violations(adapter.library) == []
print(adapter.library.name)
"""
    checks = []
    for command in ([PYTHON, "-c", code], [PYTHON, "-m", "opbridge", "check-op", package]):
        result = subprocess.run(
            command, capture_output=True, text=True, env=stable, cwd=tempfile.gettempdir()
        )
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        checks.append(result.stdout)
    library, report = checks
    assert library.strip().endswith("_torch_stable.so"), library
    assert library.strip() in report and f"{package}: every check passed" in report, report
    default = run(PYTHON, "-c", f"import {package}; print({package}.LIBRARY.torch_adapter.kind)")
    assert default.strip() == "default", default
    # PyTorch's convention: torch.ops.load_library of its PyTorch library,
    # in a fresh process that never imports the package, registers its ops.
    facts = run(
        PYTHON,
        "-c",
        f"import {package} as p; l = p.LIBRARY; "
        "print(l.torch_library_path, l.torch_namespace, ' '.join(sorted(l.specs())))",
    ).split()
    path, namespace, ops = facts[0], facts[1], facts[2:]
    check = (
        f"import torch; torch.ops.load_library({path!r}); "
        f"print([hasattr(torch.ops.{namespace}, op) for op in {ops!r}])"
    )
    registered = run(PYTHON, "-c", check, cwd=tempfile.gettempdir())
    assert registered.strip() == str([True] * len(ops)), registered
