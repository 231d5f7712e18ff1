"""The checks every opbridge operator gets (opbridge.sdk.testing), for swiglu_clamp."""

import pytest
import torch
from my_fused_ops import SWIGLU_CLAMP_CARD as CARD
from my_fused_ops import swiglu_clamp

import opbridge.sdk.testing as checks
from opbridge.ops import check_card

# Values of limit the kernel refuses (its CheckLimit: positive, not NaN).
INVALID_ATTRS = {"limit": [0.0, -1.0, float("nan")]}


def test_card_is_complete():
    assert check_card(CARD) == []


@pytest.mark.parametrize("dtype", checks.supported_dtypes(CARD), ids=str)
def test_matches_reference(dtype):
    checks.check_reference(CARD, dtypes=(dtype,), **checks.tolerance(dtype))


def test_takes_every_floating_dtype():
    assert set(checks.supported_dtypes(CARD)) == {
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
    }


def test_opcheck():
    checks.check_opcheck(CARD)


def test_gradcheck():
    checks.check_gradcheck(CARD)


def test_gradients_at_the_clamp_bounds_follow_torch_clamp():
    # Inclusive bounds: the gradient passes at gate == limit and up == +-limit.
    gate = torch.tensor([-8.0, 2.0, 3.0, 3.5, 5.0], dtype=torch.float64, requires_grad=True)
    up = torch.tensor([-3.0, 3.0, -4.0, 1.0, 2.5], dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(CARD.reference(gate, up, 3.0).sum(), (gate, up))
    got = torch.autograd.grad(swiglu_clamp(gate, up, 3.0).sum(), (gate, up))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_compile():
    checks.check_compile(CARD)


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
