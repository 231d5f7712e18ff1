"""The module rules of ``patch``: which modules opbridge replaces, and with
what. A rule is ``rule(parent, name, child) -> {child_name: new_module} | None``
(see :mod:`opbridge.patching`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import torch
from torch import nn

from opbridge import nn as obnn
from opbridge.patching.probe import PROBE_TOLERANCE, differs, dtype_of, probing
from opbridge.patching.probe import probe as _probe
from opbridge.patching.summary import Leave

Rule = Callable[[nn.Module, str, nn.Module], Mapping[str, nn.Module] | None]


def _rule_name(rule: Rule) -> str:
    return getattr(rule, "rule_name", getattr(rule, "__name__", type(rule).__name__))


def _share(new: nn.Module, name: str, param: nn.Parameter | None) -> None:
    if param is None:
        new.register_parameter(name, None)
    else:
        setattr(new, name, param)


def _rms_norm_from(weight: nn.Parameter, eps: float, offset: float = 0.0) -> obnn.RMSNorm:
    new = obnn.RMSNorm(weight.shape[0], eps=eps, device="meta", offset=offset)
    _share(new, "weight", weight)
    return new


def torch_rmsnorm_rule(parent: nn.Module, name: str, child: nn.Module):
    """``torch.nn.RMSNorm`` over the last dimension with a weight ->
    ``opbridge.nn.RMSNorm`` (``eps=None`` becomes the weight dtype's machine
    epsilon, which is what torch uses for that dtype)."""
    if type(child) is not nn.RMSNorm or child.weight is None or len(child.normalized_shape) != 1:
        return None
    eps = child.eps if child.eps is not None else torch.finfo(child.weight.dtype).eps
    return {name: _rms_norm_from(child.weight, eps)}


torch_rmsnorm_rule.rule_name = "torch.nn.RMSNorm"


def _layer_norm_from(child: nn.LayerNorm, cls: type) -> obnn.LayerNorm:
    """An opbridge ``cls`` (LayerNorm or LayerNorm2d) sharing ``child``'s
    weight and bias parameters (or none)."""
    new = cls(
        child.normalized_shape[0],
        eps=child.eps,
        elementwise_affine=child.weight is not None,
        bias=child.bias is not None,
        device="meta",
    )
    _share(new, "weight", child.weight)
    _share(new, "bias", child.bias)
    return new


def torch_layernorm_rule(parent: nn.Module, name: str, child: nn.Module):
    """``torch.nn.LayerNorm`` over the last dimension -> ``opbridge.nn.LayerNorm``
    (the same weight and bias parameters, or none)."""
    if type(child) is not nn.LayerNorm or len(child.normalized_shape) != 1:
        return None
    return {name: _layer_norm_from(child, obnn.LayerNorm)}


torch_layernorm_rule.rule_name = "torch.nn.LayerNorm"


def layernorm_subclass_rule(parent: nn.Module, name: str, child: nn.Module):
    """A subclass of ``torch.nn.LayerNorm`` (timm's ``LayerNorm`` and
    ``LayerNorm2d``...) -> ``opbridge.nn.LayerNorm`` or, for a norm over the
    channels of NCHW input, ``opbridge.nn.LayerNorm2d``: the probe check
    picks the one the module computes; one that computes neither is left
    and listed."""
    if type(child) is nn.LayerNorm or not isinstance(child, nn.LayerNorm):
        return None
    if len(child.normalized_shape) != 1 or len(child._modules):
        raise Leave("normalizes more than one dimension or has submodules")
    mismatches = []
    for cls in (obnn.LayerNorm, obnn.LayerNorm2d):
        new = _layer_norm_from(child, cls)
        mismatches.append(_probe([child], [new]))
        if mismatches[-1] is None:
            return {name: new}
    raise Leave(f"computes neither a last-dimension nor a channel layer norm: {mismatches[0]}")


layernorm_subclass_rule.rule_name = "LayerNorm subclass"


def rms_norm_rule(*classes: type, offset: float = 0.0) -> Rule:
    """A rule for modules that compute ``x * rsqrt(mean(x^2, -1) + eps) *
    (offset + weight)`` under another name (e.g. ``LlamaRMSNorm``;
    ``offset=1.0`` for Gemma's ``(1 + weight)`` norms): instances of
    ``classes`` with a 1-D ``weight`` and an ``eps`` or ``variance_epsilon``
    attribute become ``opbridge.nn.RMSNorm``. A class that computes something
    else is refused by the probe check (see the module's documentation)."""

    def rule(parent: nn.Module, name: str, child: nn.Module):
        if not isinstance(child, classes):
            return None
        weight = getattr(child, "weight", None)
        eps = getattr(child, "eps", getattr(child, "variance_epsilon", None))
        if not isinstance(weight, nn.Parameter) or weight.dim() != 1 or eps is None:
            raise TypeError(
                f"opbridge.patch: {type(child).__name__} at '{name}' was asked for as an RMSNorm "
                "but lacks a 1-D weight parameter and an eps or variance_epsilon attribute"
            )
        return {name: _rms_norm_from(weight, float(eps), offset)}

    rule.rule_name = "RMSNorm-like: " + ", ".join(c.__name__ for c in classes)
    if offset:
        rule.rule_name += f" (offset {offset:g})"
    return rule


# Class names of RMS norms under other names: Hugging Face's LlamaRMSNorm,
# Qwen3RMSNorm, GemmaRMSNorm, T5LayerNorm...; timm's RmsNorm (not RmsNorm2d,
# a channel norm).
_RMS_NORM_NAME = re.compile(r"(rms_?norm|T5LayerNorm)$", re.IGNORECASE)


def rms_norm_like_rule(parent: nn.Module, name: str, child: nn.Module):
    """A module named like an RMS norm (``*RMSNorm``, ``*RmsNorm``,
    ``*T5LayerNorm``) with only a 1-D ``weight`` and an ``eps`` or
    ``variance_epsilon`` -> ``opbridge.nn.RMSNorm``, scaling by ``weight`` or
    by ``1 + weight`` (Gemma): the probe check picks the one the module
    computes. One that computes neither (e.g. a channel norm over NCHW) is
    left as it is, listed in ``opbridge_patch_summary.left``."""
    if isinstance(child, nn.RMSNorm | obnn.RMSNorm) or not _RMS_NORM_NAME.search(
        type(child).__name__
    ):
        return None
    weight = getattr(child, "weight", None)
    eps = getattr(child, "eps", getattr(child, "variance_epsilon", None))
    if not isinstance(weight, nn.Parameter) or weight.dim() != 1 or not isinstance(eps, float):
        raise Leave("no 1-D weight parameter with a float eps or variance_epsilon")
    if len(list(child.parameters())) != 1 or len(child._modules):
        raise Leave("has parameters or submodules besides its weight")
    mismatches = []
    for offset in (0.0, 1.0):
        candidate = _rms_norm_from(weight, eps, offset)
        mismatches.append(_probe([child], [candidate]))
        if mismatches[-1] is None:
            return {name: candidate}
    raise Leave(f"computes neither weight nor (1 + weight) times x / rms(x): {mismatches[0]}")


rms_norm_like_rule.rule_name = "RMSNorm-like"


def _gelu_approximate(module: nn.Module) -> str | None:
    """``"none"`` or ``"tanh"``: the GELU ``module`` computes (on a probe),
    or None for anything else (e.g. QuickGELU)."""
    if type(module) is nn.GELU:
        return module.approximate
    if "gelu" not in type(module).__name__.lower() or any(True for _ in module.parameters()):
        return None
    x = torch.linspace(-6.0, 6.0, 97, dtype=torch.float32)
    try:
        with probing(module):
            got = module(x)
    except Exception:
        return None
    rtol, atol = PROBE_TOLERANCE[torch.float32]
    for approximate in ("none", "tanh"):
        want = torch.nn.functional.gelu(x, approximate=approximate)
        if isinstance(got, torch.Tensor) and torch.allclose(got, want, rtol=rtol, atol=atol):
            return approximate
    return None


class _MatMul(nn.Module):
    """``x @ weight``: Hugging Face's ``Conv1D`` (GPT-2) without its bias."""

    def __init__(self, weight: nn.Parameter):
        super().__init__()
        self.weight = weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def _unbiased(linear: nn.Module) -> tuple[nn.Module, nn.Parameter, int, int] | None:
    """``(linear without bias, bias, in, out)`` for a biased ``nn.Linear`` or
    Hugging Face ``Conv1D``; None for anything else."""
    bias = getattr(linear, "bias", None)
    if not isinstance(bias, nn.Parameter):
        return None
    if type(linear) is nn.Linear:
        new = nn.Linear(linear.in_features, linear.out_features, bias=False, device="meta")
        _share(new, "weight", linear.weight)
        return new, bias, linear.in_features, linear.out_features
    weight = getattr(linear, "weight", None)
    if (
        type(linear).__name__ == "Conv1D"
        and isinstance(weight, nn.Parameter)
        and weight.dim() == 2
        and getattr(linear, "nf", None) == weight.shape[1] == bias.shape[0]
    ):
        return _MatMul(weight), bias, weight.shape[0], weight.shape[1]
    return None


def _parent_computes_same(parent: nn.Module, changes: Mapping[str, nn.Module], size: int) -> str:
    """Runs ``parent`` on a ``[2, 3, size]`` probe with and without
    ``changes``: "" when the outputs agree, else why not."""
    dtype = dtype_of([parent])
    if dtype is None:
        return "its parameters are on the meta device"
    device = next((p.device for p in parent.parameters()), torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn((2, 3, size), generator=generator).to(device, dtype)
    originals = {n: parent._modules[n] for n in changes}
    try:
        with probing(parent, *changes.values()):
            want = parent(x)
            for n, new in changes.items():
                setattr(parent, n, new)
            got = parent(x)
    except Exception as error:
        first = str(error).strip().splitlines()
        return f"{type(parent).__name__} did not run on a probe: {first[0] if first else error!r}"
    finally:
        for n, old in originals.items():
            setattr(parent, n, old)
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        return f"{type(parent).__name__} does not return one tensor"
    if differs(got, want) is not None:
        return f"{type(parent).__name__} does not apply it right after a biased linear layer"
    return ""


def linear_gelu_rule(parent: nn.Module, name: str, child: nn.Module):
    """A GELU (``nn.GELU``, or a module named like one that computes the erf
    or tanh GELU: Hugging Face's ``GELUActivation``, ``NewGELUActivation``,
    ``GELUTanh``...) applied to a biased ``nn.Linear`` (or Hugging Face
    ``Conv1D``) -> that layer without its bias + ``opbridge.nn.BiasGELU``
    holding the bias. In an ``nn.Sequential`` the layer is the one right
    before; elsewhere (BERT's intermediate layer, GPT-2's or ViT's MLP) the
    sibling whose pairing leaves the parent's output unchanged on a probe."""
    approximate = _gelu_approximate(child)
    if approximate is None:
        return None
    names = list(parent._modules)
    index = names.index(name)
    if isinstance(parent, nn.Sequential):
        candidates = names[index - 1 : index] if index else []
    else:
        candidates = [n for n in names if n != name]
    reasons = []
    for other in candidates:
        found = _unbiased(parent._modules[other])
        if found is None:
            continue
        unbiased, bias, size_in, size_out = found
        gelu = obnn.BiasGELU(size_out, approximate=approximate, device="meta")
        _share(gelu, "bias", bias)
        changes = {other: unbiased, name: gelu}
        if isinstance(parent, nn.Sequential):
            return changes
        reason = _parent_computes_same(parent, changes, size_in)
        if not reason:
            return changes
        reasons.append(reason)
    if isinstance(parent, nn.Sequential) and not candidates:
        return None
    raise Leave(reasons[0] if reasons else "no biased linear layer feeds it")


linear_gelu_rule.rule_name = "linear + GELU"

DEFAULT_RULES: tuple[Rule, ...] = (
    torch_rmsnorm_rule,
    torch_layernorm_rule,
    layernorm_subclass_rule,
    rms_norm_like_rule,
    linear_gelu_rule,
)
