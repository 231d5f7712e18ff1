"""Compares the installed versions of the packages pinned in requirements.txt
with their pins. Prints one line per drifted package ("torch: installed
2.12.0, pinned 2.13.0" or "torch: not installed, pinned 2.13.0") and exits 1
when anything drifted, 0 when the environment matches.

    python scripts/check_pins.py requirements.txt

Only reads installed metadata (no pip, no network), so ./dev can run it on
every call.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def read_pins(text: str) -> dict[str, str]:
    """``name==version`` lines of a requirements file (comments, blank lines
    and anything that is not an exact pin are skipped)."""
    pins = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            pins[match.group(1)] = match.group(2)
    return pins


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def matches(installed: str, pinned: str) -> bool:
    """``installed`` satisfies ``==pinned``; as in PEP 440, a pin without a
    local label accepts one (torch 2.13.0+cpu satisfies torch==2.13.0)."""
    if "+" not in pinned:
        installed = installed.split("+", 1)[0]
    return installed == pinned


def drift(pins: dict[str, str], installed: Callable[[str], str | None] = _installed) -> list[str]:
    """One line for each pinned package whose installed version differs."""
    lines = []
    for name, want in pins.items():
        have = installed(name)
        if have is None:
            lines.append(f"{name}: not installed, pinned {want}")
        elif not matches(have, want):
            lines.append(f"{name}: installed {have}, pinned {want}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: check_pins.py REQUIREMENTS", file=sys.stderr)
        return 2
    lines = drift(read_pins(Path(argv[1]).read_text()))
    for line in lines:
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
