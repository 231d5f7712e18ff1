"""opbridge.testing's checks (what a user's operator is tested with) hold for
the built-in operators, and fail where they should."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import opbridge.testing as checks
from opbridge.ops import card, cards

BUILTIN = [q for q in cards() if q.startswith("opbridge::")]


@pytest.mark.parametrize("qualified", BUILTIN)
def test_bad_input_check_passes_for_builtin_ops(qualified):
    checks.check_bad_input(card(qualified))


@pytest.mark.parametrize("route", ["custom", "standard", "ort", "function"])
def test_export_check_passes_for_a_builtin_op(route):
    checks.check_export(card("rms_norm"), route=route, dynamo=True)


def test_reference_check_fails_on_a_wrong_reference():
    wrong = dataclasses.replace(card("scaled_clamp"), reference=lambda x, *a, **k: x)
    with pytest.raises(AssertionError):
        checks.check_reference(wrong, dtypes=(torch.float64,))


def test_export_check_fails_on_a_wrong_decomposition():
    def wrong(b, x, weight, bias=None, *, eps):
        return b.op("Mul", x, weight)

    broken = dataclasses.replace(card("rms_norm"), standard=wrong)
    # The export takes the registered card's decomposition.
    from opbridge.ops import register_card

    register_card(broken)
    try:
        with pytest.raises(AssertionError):
            checks.check_export(broken, route="standard", dynamo=True)
    finally:
        from opbridge.ops import _card

        _card._REGISTERED.pop(broken.qualified_name, None)
