"""One call of an operator, as a card's samples give it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sample:
    """One call of an operator: ``call(*args, **kwargs)``."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def __repr__(self) -> str:
        return self.label
