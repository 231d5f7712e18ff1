"""The checks every opbridge operator gets (opbridge.sdk.testing), for
gated_rope, and what is its own: the integer positions input, the gate's
gradient summed over batch, sequence and head_dim the same for any thread
count, and the composite a model writes."""

import pytest
import torch
from my_fused_ops import GATED_ROPE_CARD as CARD
from my_fused_ops import gated_rope
from my_fused_ops.rope import composite, reference

import opbridge.sdk.testing as checks
from opbridge.ops import check_card

# Values of base the kernel refuses (its CheckBase: positive and finite).
INVALID_ATTRS = {"base": [0.0, -2.0, float("nan"), float("inf")]}


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


def test_compile():
    checks.check_compile(CARD)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_equals_the_composite_a_model_writes(dtype):
    # transformers' rotary embedding computes its angles in float32 and
    # rotates in x's dtype; the kernel is the more exact of the two, so they
    # agree within the dtype's tolerance at positions where float32 angles
    # are still exact to a few ulps.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, 4, 64, generator=g).to(dtype)
    positions = torch.randint(0, 512, (2, 16), generator=g)
    gate = (1.0 + 0.1 * torch.randn(4, generator=g)).to(dtype)
    tol = {torch.float32: 2e-4, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(
        gated_rope(x, positions, gate), composite(x, positions, gate), atol=tol, rtol=tol
    )


def test_gate_gradient_is_the_same_for_any_thread_count():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 300, 4, 32, generator=g)
    positions = torch.randint(0, 4096, (4, 300), generator=g)
    grad_y = torch.randn(x.shape, generator=g)
    threads = torch.get_num_threads()
    grads = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            gate = torch.ones(4, requires_grad=True)
            gated_rope(x, positions, gate).backward(grad_y)
            grads.append(gate.grad)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0], grads[2])
    rotated = reference(x.double(), positions, torch.ones(4, dtype=torch.float64))
    want = (rotated * grad_y).sum((0, 1, 3))
    torch.testing.assert_close(grads[0], want.float(), rtol=1e-5, atol=1e-4)


def test_positions_take_no_gradient_and_gate_gets_one():
    x = torch.randn(1, 3, 2, 4, requires_grad=True)
    gate = torch.ones(2, requires_grad=True)
    gated_rope(x, torch.arange(3)[None], gate).sum().backward()
    assert x.grad is not None and gate.grad is not None


def test_positions_of_another_dtype_are_refused():
    x, gate = torch.randn(1, 3, 2, 4), torch.ones(2)
    with pytest.raises(RuntimeError, match=r"gated_rope.*'positions'.*int64 or int32.*float"):
        gated_rope(x, torch.arange(3.0)[None], gate)


def test_an_odd_head_dim_is_refused():
    with pytest.raises(RuntimeError, match=r"gated_rope.*'x'.*even head_dim"):
        gated_rope(torch.randn(1, 3, 2, 5), torch.arange(3)[None], torch.ones(2))


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
