"""The checks every opbridge operator gets (opbridge.sdk.testing), for fused_norm."""

import pytest
import torch
from my_fused_ops import CARD, FusedNorm

import opbridge
import opbridge.sdk.testing as checks
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
    checks.check_export(CARD, route=route, dynamo=dynamo)


# Every route in each other runtime installed here (OpenVINO).
RUNTIMES = checks.runtime_cases()


@pytest.mark.parametrize(("route", "runtime"), RUNTIMES, ids=[f"{r}-{n}" for r, n in RUNTIMES])
def test_export_runs_in_every_runtime(route, runtime):
    checks.check_export(CARD, route=route, runtime=runtime)


def test_bad_input():
    checks.check_bad_input(CARD)


class PlainNorm(torch.nn.Module):
    """What a model would hold before adopting fused_norm."""

    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(dim))
        self.bias = torch.nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight + self.bias


def fused_norm_rule(parent, name, child):
    """An opbridge.patch rule: PlainNorm -> FusedNorm, sharing the parameters."""
    if not isinstance(child, PlainNorm):
        return None
    fused = FusedNorm(child.weight.numel())
    fused.weight, fused.bias = child.weight, child.bias
    return {name: fused}


def test_patch_rule_adopts_fused_norm_and_unpatch_restores():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), PlainNorm(32), torch.nn.Linear(32, 8))
    x = torch.randn(4, 16)
    before = model(x)
    opbridge.patch(model, rules=[fused_norm_rule])
    assert isinstance(model[1], FusedNorm)
    torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)
    opbridge.unpatch(model)
    assert isinstance(model[1], PlainNorm)
    assert torch.equal(model(x), before)
