"""Running code in a fresh Python process, for tests of what happens at
import or load time (whatever folder they are in)."""

from __future__ import annotations

import os
import subprocess
import sys


def python_code(code: str, *, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """``python -c code`` with this environment plus ``env``; its outcome
    (not checked: the caller asserts on it)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
        timeout=timeout,
    )
