"""What ``patch`` did: the replacements, what it skipped or left, and why."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

SUMMARY_ATTR = "opbridge_patch_summary"


@dataclass
class Replacement:
    """One change ``patch`` made: ``original`` -> ``replacement`` at ``path``.
    For a changed forward (``classes`` set: the module's class before and
    after) the module stays the same object and ``original`` is
    ``replacement``."""

    path: str  # dotted name of the replaced child in the model
    rule: str
    original: nn.Module
    replacement: nn.Module
    classes: tuple[type, type] | None = None

    def describe(self) -> str:
        if self.classes is not None:
            return f"{self.classes[0].__name__} -> fused forward"
        return f"{type(self.original).__name__} -> {type(self.replacement).__name__}"


@dataclass
class Skipped:
    path: str
    rule: str
    reason: str


class PatchError(ValueError):
    """A replacement that would change the model's numbers."""


class Leave(Exception):
    """Raised by a rule for a module it recognizes but does not replace: the
    reason goes to ``opbridge_patch_summary.left``."""


@dataclass
class PatchSummary:
    """What ``patch`` replaced (or ``unpatch`` restored), in walk order, and
    what it left: ``skipped``, a replacement refused by its probe check
    (``on_mismatch="skip"``); ``left``, a module a rule recognized but could
    not replace (the reason says why)."""

    replaced: list[Replacement] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    left: list[Skipped] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.replaced)

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for r in self.replaced:
            found[r.rule] = found.get(r.rule, 0) + 1
        return found

    def __str__(self) -> str:
        if not self.replaced:
            lines = ["opbridge.patch: nothing replaced"]
        else:
            lines = [f"opbridge.patch: {len(self.replaced)} module(s) replaced"]
        for r in self.replaced:
            lines.append(f"  {r.path}: {r.describe()} ({r.rule})")
        left = self.skipped + self.left
        if left:
            lines.append(f"left ({len(left)}):")
            lines += [f"  {s.path} ({s.rule}): {s.reason}" for s in left]
        return "\n".join(lines)
