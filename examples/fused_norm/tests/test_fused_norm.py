"""The checks every opbridge operator gets (opbridge.testing), for fused_norm."""

import pytest
from my_fused_ops import CARD

import opbridge.testing as checks
from opbridge.ops import check_card


def test_card_is_complete():
    assert check_card(CARD) == []


def test_matches_reference():
    checks.check_reference(CARD)


def test_opcheck():
    checks.check_opcheck(CARD)


def test_gradcheck():
    checks.check_gradcheck(CARD)


def test_compile():
    checks.check_compile(CARD)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "legacy"])
@pytest.mark.parametrize("route", ["custom", "standard"])
def test_export_runs_in_onnx_runtime(route, dynamo):
    checks.check_export(CARD, route, dynamo=dynamo)


def test_bad_input():
    checks.check_bad_input(CARD)
