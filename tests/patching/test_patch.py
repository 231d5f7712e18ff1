"""opbridge.patch / unpatch on models with each supported pattern."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import opbridge


class LlamaRMSNorm(nn.Module):
    """As in common LLaMA implementations."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


class Net(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 32),
            nn.GELU(),
            nn.Linear(32, 32),
            nn.GELU(approximate="tanh"),
            nn.Linear(32, dim),
        )
        self.llama_norm = LlamaRMSNorm(dim, eps=1e-5)
        self.default_eps_norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        x = self.mlp(self.norm(x))
        return self.head(self.default_eps_norm(self.llama_norm(x)))


def _randomize(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)


def test_patch_replaces_each_pattern_and_keeps_outputs():
    torch.manual_seed(0)
    model = Net()
    _randomize(model)
    reference = copy.deepcopy(model)
    x = torch.randn(4, 7, 16)
    patched = opbridge.patch(model, rules=[opbridge.patching.rms_norm_rule(LlamaRMSNorm)])
    assert patched is model
    summary = model.opbridge_patch_summary
    assert summary.counts() == {
        "torch.nn.RMSNorm": 2,
        "RMSNorm-like: LlamaRMSNorm": 1,
        "linear + GELU": 4,
    }
    assert "mlp.1: GELU -> BiasGELU" in str(summary)
    assert isinstance(model.norm, opbridge.nn.RMSNorm)
    assert isinstance(model.llama_norm, opbridge.nn.RMSNorm)
    assert isinstance(model.mlp[1], opbridge.nn.BiasGELU) and model.mlp[0].bias is None
    assert model.mlp[3].approximate == "tanh"
    assert model.default_eps_norm.eps == torch.finfo(torch.float32).eps
    # Parameters are shared, not copied.
    assert model.mlp[1].bias is summary.replaced[1].original.bias
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), atol=1e-5, rtol=1e-5)
    types = {type(m) for m in model.modules()}
    assert nn.RMSNorm not in types and nn.GELU not in types and LlamaRMSNorm not in types


def test_rms_norm_named_class_is_found_without_a_rule():
    torch.manual_seed(0)
    model = Net()
    _randomize(model)
    reference = copy.deepcopy(model)
    opbridge.patch(model)
    assert isinstance(model.llama_norm, opbridge.nn.RMSNorm)
    assert model.llama_norm.offset == 0.0
    assert model.opbridge_patch_summary.counts()["RMSNorm-like"] == 1
    x = torch.randn(4, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), atol=1e-5, rtol=1e-5)


def test_gelu_not_after_biased_linear_is_left_alone():
    model = nn.Sequential(nn.GELU(), nn.Linear(4, 4, bias=False), nn.GELU(), nn.ReLU())
    opbridge.patch(model)
    summary = model.opbridge_patch_summary
    assert len(summary) == 0
    assert "nothing replaced" in str(summary)
    assert [(s.path, s.reason) for s in summary.left] == [("2", "no biased linear layer feeds it")]


def test_patched_model_trains_and_unpatch_restores_trained_originals():
    torch.manual_seed(0)
    model = Net()
    _randomize(model)
    opbridge.patch(model, rules=[opbridge.patching.rms_norm_rule(LlamaRMSNorm)])
    x, target = torch.randn(64, 16), torch.randn(64, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    with torch.no_grad():
        trained = model(x)
    opbridge.unpatch(model)
    assert len(model.opbridge_patch_summary) == 7
    assert isinstance(model.norm, nn.RMSNorm) and isinstance(model.mlp[1], nn.GELU)
    assert isinstance(model.llama_norm, LlamaRMSNorm) and model.mlp[0].bias is not None
    with torch.no_grad():
        torch.testing.assert_close(model(x), trained, atol=1e-5, rtol=1e-5)


def test_user_rule_and_bad_class_rule():
    class MyAct(nn.Module):
        def forward(self, x):
            return torch.clamp(x * 2.0, 0.0, 6.0)

    def my_rule(parent, name, child):
        if isinstance(child, MyAct):
            return {name: opbridge.nn.ScaledClamp(2.0)}
        return None

    model = nn.Sequential(nn.Linear(4, 4), MyAct())
    x = torch.randn(3, 4) * 4
    expected = model(x)
    opbridge.patch(model, rules=[my_rule])
    assert isinstance(model[1], opbridge.nn.ScaledClamp)
    assert model.opbridge_patch_summary.counts() == {"my_rule": 1}
    torch.testing.assert_close(model(x), expected)

    with pytest.raises(TypeError, match="lacks a 1-D weight parameter"):
        opbridge.patch(nn.Sequential(nn.ReLU()), rules=[opbridge.patching.rms_norm_rule(nn.ReLU)])


def test_patched_model_exports_by_both_routes():
    from ort_helpers import run

    torch.manual_seed(0)
    model = Net().eval()
    opbridge.patch(model, rules=[opbridge.patching.rms_norm_rule(LlamaRMSNorm)])
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        expected = model(x).numpy()
    for route in ("custom", "standard"):
        proto = opbridge.export.export(model, (x,), route=route)
        types = {n.op_type for n in proto.graph.node if n.domain == "opbridge"}
        assert types == ({"RmsNorm", "BiasGelu"} if route == "custom" else set())
        (got,) = run(proto, [x.numpy()])
        import numpy as np

        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


class GemmaRMSNorm(nn.Module):
    """Gemma's norm: scales by (1 + weight), the weight starting at zero."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class ChannelRMSNorm(nn.Module):
    """An RMS norm over the channels of NCHW input (as timm's RmsNorm2d)."""

    def __init__(self, channels, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + self.eps)
        return x * self.weight[:, None, None]


def _gemma_net():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), GemmaRMSNorm(16), nn.Linear(16, 4))
    with torch.no_grad():
        model[1].weight.normal_(0.0, 0.2)
    return model


def test_gemma_norm_without_offset_is_refused_naming_the_module():
    model = _gemma_net()
    before = copy.deepcopy(model)
    rule = opbridge.patching.rms_norm_rule(GemmaRMSNorm)
    with pytest.raises(opbridge.patching.PatchError, match=r"^opbridge.patch: 1 \(GemmaRMSNorm\)"):
        opbridge.patch(model, rules=[rule])
    assert isinstance(model[1], GemmaRMSNorm)
    x = torch.randn(3, 16)
    torch.testing.assert_close(model(x), before(x), rtol=0, atol=0)


def test_gemma_norm_with_offset_is_replaced_and_exact():
    model = _gemma_net()
    reference = copy.deepcopy(model)
    opbridge.patch(model, rules=[opbridge.patching.rms_norm_rule(GemmaRMSNorm, offset=1.0)])
    assert isinstance(model[1], opbridge.nn.RMSNorm) and model[1].offset == 1.0
    x = torch.randn(5, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
    # The same state_dict: the weight is shared, the offset is not a parameter.
    assert model.state_dict().keys() == reference.state_dict().keys()


@pytest.mark.parametrize("channels", [7, 16])
def test_channel_norm_on_nchw_is_refused_even_when_width_equals_channels(channels):
    model = nn.Sequential(nn.Conv2d(3, channels, 1), ChannelRMSNorm(channels))
    rule = opbridge.patching.rms_norm_rule(ChannelRMSNorm)
    with pytest.raises(opbridge.patching.PatchError, match="would change the model's numbers"):
        opbridge.patch(model, rules=[rule])


def test_skip_leaves_the_module_with_a_warning_and_lists_it():
    model = nn.Sequential(nn.RMSNorm(16), _gemma_net())
    with pytest.warns(UserWarning, match="left as it was"):
        opbridge.patch(
            model,
            rules=[opbridge.patching.rms_norm_rule(GemmaRMSNorm)],
            on_mismatch="skip",
        )
    summary = model.opbridge_patch_summary
    assert isinstance(model[0], opbridge.nn.RMSNorm)
    assert [s.path for s in summary.skipped] == ["1.1"]
    assert "differ by up to" in summary.skipped[0].reason
    assert "left (1):" in str(summary)
    # The built-in rule, tried next, finds the (1 + weight) form itself.
    assert isinstance(model[1][1], opbridge.nn.RMSNorm) and model[1][1].offset == 1.0
    assert summary.replaced[-1].rule == "RMSNorm-like"


def test_rms_norm_named_channel_norm_is_left_and_listed():
    model = nn.Sequential(nn.Conv2d(3, 16, 1), ChannelRMSNorm(16))
    x = torch.randn(2, 3, 5, 16)
    expected = model(x)
    opbridge.patch(model)
    assert isinstance(model[1], ChannelRMSNorm)
    (left,) = model.opbridge_patch_summary.left
    assert left.path == "1" and left.rule == "RMSNorm-like"
    assert "computes neither" in left.reason and "on a probe of shape" in left.reason
    torch.testing.assert_close(model(x), expected, rtol=0, atol=0)


def test_refusal_undoes_the_replacements_made_before_it():
    model = nn.Sequential(nn.RMSNorm(16), _gemma_net())
    with pytest.raises(opbridge.patching.PatchError):
        opbridge.patch(model, rules=[opbridge.patching.rms_norm_rule(GemmaRMSNorm)])
    assert type(model[0]) is nn.RMSNorm
    with pytest.raises(ValueError, match="on_mismatch must be 'refuse' or 'skip'"):
        opbridge.patch(model, on_mismatch="ignore")


@pytest.mark.parametrize(
    "norm",
    [nn.LayerNorm(16), nn.LayerNorm(16, bias=False), nn.LayerNorm(16, elementwise_affine=False)],
    ids=["affine", "no-bias", "no-affine"],
)
def test_layernorm_is_replaced_exactly_and_restored(norm):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), norm, nn.Linear(16, 4))
    with torch.no_grad():
        for p in norm.parameters():
            p.normal_(1.0, 0.3)
    reference = copy.deepcopy(model)
    x = torch.randn(3, 5, 16)
    opbridge.patch(model)
    assert isinstance(model[1], opbridge.nn.LayerNorm)
    assert model.opbridge_patch_summary.counts() == {"torch.nn.LayerNorm": 1}
    assert model.state_dict().keys() == reference.state_dict().keys()
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
    opbridge.unpatch(model)
    assert model[1] is norm


def test_layernorm_over_two_dims_is_left_alone():
    model = nn.Sequential(nn.LayerNorm((4, 16)))
    opbridge.patch(model)
    assert len(model.opbridge_patch_summary) == 0
