"""Installing and running a user's operator project (an out-of-tree package
built on the SDK) from the tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
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
    """The project's own tests pass, and ``opbridge verify`` passes the
    example's model by both routes."""
    run(PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=project)
    for route in ("custom", "standard"):
        out = run(PYTHON, "-m", "opbridge", "verify", f"{example}:make", "--route", route)
        assert "PASS" in out, out
