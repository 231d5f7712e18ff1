"""The checks every opbridge operator gets (opbridge.sdk.testing), for
pairwise_dot, an output whose size the shape rule computes from F."""

import pytest
import torch
from my_fused_ops import PAIRWISE_DOT_CARD as CARD
from my_fused_ops import pairwise_dot

import opbridge.sdk.testing as checks
from opbridge.ops import check_card


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


def test_edge_sizes():
    # One feature: no pairs; empty vectors: every product 0.
    assert pairwise_dot(torch.randn(3, 1, 4)).shape == (3, 0)
    torch.testing.assert_close(pairwise_dot(torch.randn(2, 4, 0)), torch.zeros(2, 6))
    assert pairwise_dot(torch.randn(0, 5, 4)).shape == (0, 10)


def test_one_graph_for_every_number_of_features():
    counts = {"frames": 0}

    def backend(gm, example_inputs):
        counts["frames"] += 1
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(pairwise_dot, backend=backend, dynamic=True, fullgraph=True)
    for f in (4, 7, 11):
        x = torch.randn(3, f, 8)
        torch.testing.assert_close(compiled(x), CARD.reference(x))
    assert counts["frames"] == 1


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


@pytest.mark.parametrize("bad", checks.bad_inputs(CARD, {}), ids=repr)
def test_bad_input_is_refused(bad):
    checks.check_refused(CARD, bad)
