"""The checks every opbridge operator gets (opbridge.sdk.testing), for
softmax_lse: two outputs, a backward through both, masked (-inf) logits."""

import math

import pytest
import torch
from my_fused_ops import SOFTMAX_LSE_CARD as CARD
from my_fused_ops import softmax_lse

import opbridge.sdk.testing as checks
from opbridge.ops import check_card

# Values of temperature the shape rule refuses (positive and finite only).
INVALID_ATTRS = {"temperature": [0.0, -1.0, float("nan"), float("inf")]}


def test_card_is_complete():
    assert check_card(CARD) == []


@pytest.mark.parametrize("dtype", checks.supported_dtypes(CARD), ids=str)
def test_matches_reference(dtype):
    checks.check_reference(CARD, dtypes=(dtype,), **checks.tolerance(dtype))


def test_opcheck():
    checks.check_opcheck(CARD)


def test_gradcheck():
    checks.check_gradcheck(CARD)


def test_gradients_through_either_output_alone_match_torch():
    x = torch.randn(3, 11, dtype=torch.float64, requires_grad=True)
    for pick in (0, 1):
        want = torch.autograd.grad(CARD.reference(x, 0.8)[pick].sum(), x)[0]
        got = torch.autograd.grad(softmax_lse(x, 0.8)[pick].sum(), x)[0]
        torch.testing.assert_close(got, want)


def test_a_row_with_nothing_left_has_a_logsumexp_of_minus_infinity():
    x = torch.randn(3, 8)
    x[1] = float("-inf")
    y, lse = softmax_lse(x)
    want_y, want_lse = CARD.reference(x)
    torch.testing.assert_close(y, want_y, equal_nan=True)
    torch.testing.assert_close(lse, want_lse)
    assert lse[1].item() == -math.inf and torch.isnan(y[1]).all()
    # No columns at all: every row's logsumexp is -inf, as torch's.
    y, lse = softmax_lse(torch.randn(4, 0))
    assert y.shape == (4, 0) and lse.tolist() == [-math.inf] * 4


def test_compile():
    checks.check_compile(CARD)


def test_value_domains():
    # x takes -inf (spec.h: .Values("x", kNegInfValues)): masked logits.
    checks.check_value_domains(CARD)


def test_value_domains_under_opbridge_check():
    # The same in a process under OPBRIDGE_CHECK=1, whose scan lets x's -inf
    # and lse's -inf (a fully masked row) through.
    checks.check_value_domains_under_check(CARD)


EXPORTS = checks.export_cases()


@pytest.mark.parametrize(
    ("route", "dynamo", "opset"), EXPORTS, ids=[checks.export_case_id(c) for c in EXPORTS]
)
def test_export_runs_in_onnx_runtime(route, dynamo, opset):
    checks.check_export(CARD, route=route, dynamo=dynamo, opset=opset)


# Every route in each other runtime installed here (OpenVINO).
RUNTIMES = checks.runtime_cases()


@pytest.mark.parametrize(("route", "runtime"), RUNTIMES, ids=[f"{r}-{n}" for r, n in RUNTIMES])
def test_export_runs_in_every_runtime(route, runtime):
    checks.check_export(CARD, route=route, runtime=runtime)


@pytest.mark.parametrize("bad", checks.bad_inputs(CARD, INVALID_ATTRS), ids=repr)
def test_bad_input_is_refused(bad):
    checks.check_refused(CARD, bad)
