"""The operators' cards as the tests use them: each built-in operator's pure
reference and sample-inputs generator live in its card
(``python/opbridge/ops/<op>.py``); ``OPS`` maps every op in
``opbridge.specs()`` to its card."""

from __future__ import annotations

import torch

import opbridge
from opbridge.ops import Card, Sample, card

__all__ = ["OPS", "Card", "Sample", "as_tuple", "tolerances"]

OPS: dict[str, Card] = {name: card(name) for name in opbridge.specs()}


def as_tuple(value) -> tuple:
    """An op's output(s) as a tuple (multi-output ops return tuples)."""
    return tuple(value) if isinstance(value, tuple | list) else (value,)


def tolerances(dtype):
    return (
        {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-10}
    )
