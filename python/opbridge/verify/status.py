"""The statuses of a check, a sweep cell or a layer, and a structure check."""

from __future__ import annotations

from dataclasses import dataclass

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
