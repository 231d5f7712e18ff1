"""The statuses of a check, a sweep cell or a layer, and a structure check."""

from __future__ import annotations

from dataclasses import dataclass

from opbridge import runtimes

PASS, FAIL, WARN, NOT_APPLICABLE = "pass", "fail", "warn", "n/a"


@dataclass
class Check:
    name: str
    status: str  # pass, fail, warn or n/a
    detail: str


def one_line(error: BaseException) -> str:
    """An exception as one line for the report: its type and its first 500 characters."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:500]}"


def level_text(runtime: str, level: str) -> str:
    """What a report puts beside a level of the runtime named ``runtime``:
    the level as the runtime's own API calls it
    (:meth:`opbridge.runtimes.Runtime.level_text`), else the runtime's name
    (also for a runtime no longer registered)."""
    try:
        return runtimes.get(runtime).level_text(level)
    except ValueError:
        return runtime
