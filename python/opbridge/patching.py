"""Adopting opbridge in an existing model: swap supported modules in place.

``patch(model)`` walks the module tree and applies rules; each rule may
replace children of one parent. Replacements share the original modules'
``Parameter`` objects (no copies), so a patched model trains the same
weights, and ``unpatch(model)`` puts the original modules back, trained
values included.

A rule is a callable ``rule(parent, name, child) -> dict | None``: for the
child ``name`` of ``parent`` it returns ``{child_name: new_module, ...}``
(children of ``parent`` to replace; usually just ``{name: new}``) or None.
Rules given to ``patch(rules=...)`` are tried before the built-in ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from opbridge import nn as obnn

Rule = Callable[[nn.Module, str, nn.Module], Mapping[str, nn.Module] | None]
_RECORD_ATTR = "_opbridge_patches"
SUMMARY_ATTR = "opbridge_patch_summary"


@dataclass
class Replacement:
    path: str  # dotted name of the replaced child in the model
    rule: str
    original: nn.Module
    replacement: nn.Module


@dataclass
class PatchSummary:
    """What ``patch`` replaced (or ``unpatch`` restored), in walk order."""

    replaced: list[Replacement] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.replaced)

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for r in self.replaced:
            found[r.rule] = found.get(r.rule, 0) + 1
        return found

    def __str__(self) -> str:
        if not self.replaced:
            return "opbridge.patch: nothing replaced"
        lines = [f"opbridge.patch: {len(self.replaced)} module(s) replaced"]
        for r in self.replaced:
            old, new = type(r.original).__name__, type(r.replacement).__name__
            lines.append(f"  {r.path}: {old} -> {new} ({r.rule})")
        return "\n".join(lines)


def _rule_name(rule: Rule) -> str:
    return getattr(rule, "rule_name", getattr(rule, "__name__", type(rule).__name__))


def _share(new: nn.Module, name: str, param: nn.Parameter | None) -> None:
    if param is None:
        new.register_parameter(name, None)
    else:
        setattr(new, name, param)


def _rms_norm_from(weight: nn.Parameter, eps: float) -> obnn.RMSNorm:
    new = obnn.RMSNorm(weight.shape[0], eps=eps, device="meta")
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


def rms_norm_rule(*classes: type) -> Rule:
    """A rule for modules that compute ``x * rsqrt(mean(x^2, -1) + eps) *
    weight`` under another name (e.g. ``LlamaRMSNorm``): instances of
    ``classes`` with a 1-D ``weight`` and an ``eps`` or ``variance_epsilon``
    attribute become ``opbridge.nn.RMSNorm``. Only ask for classes that compute
    exactly this (not, say, ``(1 + weight)`` variants)."""

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
        return {name: _rms_norm_from(weight, float(eps))}

    rule.rule_name = "RMSNorm-like: " + ", ".join(c.__name__ for c in classes)
    return rule


def linear_gelu_rule(parent: nn.Module, name: str, child: nn.Module):
    """``nn.GELU`` right after a biased ``nn.Linear`` in an ``nn.Sequential``
    -> the Linear without its bias + ``opbridge.nn.BiasGELU`` holding that
    bias."""
    if not isinstance(parent, nn.Sequential) or type(child) is not nn.GELU:
        return None
    names = list(parent._modules)
    index = names.index(name)
    if index == 0:
        return None
    prev_name = names[index - 1]
    linear = parent._modules[prev_name]
    if type(linear) is not nn.Linear or linear.bias is None:
        return None
    unbiased = nn.Linear(linear.in_features, linear.out_features, bias=False, device="meta")
    _share(unbiased, "weight", linear.weight)
    gelu = obnn.BiasGELU(linear.out_features, approximate=child.approximate, device="meta")
    _share(gelu, "bias", linear.bias)
    return {prev_name: unbiased, name: gelu}


linear_gelu_rule.rule_name = "nn.Linear + nn.GELU"

DEFAULT_RULES: tuple[Rule, ...] = (torch_rmsnorm_rule, linear_gelu_rule)


def _check_module(function: str, model: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"opbridge.{function}: model must be a torch.nn.Module, got {type(model).__name__}"
            + (f" {model!r}" if isinstance(model, str) else "")
        )


def patch(model: nn.Module, *, rules: list[Rule] | None = None) -> nn.Module:
    """Replaces supported modules of ``model`` in place with opbridge ones and
    returns ``model``.

    Built-in rules: ``torch.nn.RMSNorm``; ``nn.GELU`` directly after a biased
    ``nn.Linear`` in an ``nn.Sequential``. ``rules`` are tried first (e.g.
    ``rms_norm_rule(LlamaRMSNorm)``). The model itself (the root) is never
    replaced. What was replaced: ``model.opbridge_patch_summary`` (a
    :class:`PatchSummary`; print it for a table).
    """
    _check_module("patch", model)
    if rules is not None and not isinstance(rules, list | tuple):
        raise TypeError(
            f"opbridge.patch: rules must be a list of rules, got {type(rules).__name__}"
        )
    for i, rule in enumerate(rules or []):
        if not callable(rule):
            raise TypeError(
                f"opbridge.patch: rules[{i}] must be callable as rule(parent, name, child), "
                f"got {type(rule).__name__}"
            )
    all_rules = list(rules or []) + list(DEFAULT_RULES)
    summary = PatchSummary()
    records = getattr(model, _RECORD_ATTR, None)
    if records is None:
        records = []
        object.__setattr__(model, _RECORD_ATTR, records)

    def walk(parent: nn.Module, prefix: str) -> None:
        replaced: set[str] = set()
        for name in list(parent._modules):
            child = parent._modules[name]
            if child is None or name in replaced:
                continue
            for rule in all_rules:
                changes = rule(parent, name, child)
                if not changes:
                    continue
                for child_name, new in changes.items():
                    original = parent._modules[child_name]
                    setattr(parent, child_name, new)
                    replaced.add(child_name)
                    record = Replacement(prefix + child_name, _rule_name(rule), original, new)
                    summary.replaced.append(record)
                    records.append((parent, child_name, record))
                break
            else:
                walk(child, f"{prefix}{name}.")

    walk(model, "")
    object.__setattr__(model, SUMMARY_ATTR, summary)
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Puts back every module that ``patch`` replaced in ``model`` (whose
    parameters were shared, so training since is kept) and returns ``model``;
    ``model.opbridge_patch_summary`` then lists what was restored."""
    _check_module("unpatch", model)
    records = getattr(model, _RECORD_ATTR, None) or []
    summary = PatchSummary()
    for parent, child_name, record in reversed(records):
        if parent._modules.get(child_name) is record.replacement:
            setattr(parent, child_name, record.original)
            summary.replaced.append(record)
    records.clear()
    object.__setattr__(model, SUMMARY_ATTR, summary)
    return model
