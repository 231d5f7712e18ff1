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

Every replacement is checked when it is made: the original modules and
their replacements run on probe inputs built from the modules' own feature
size and dtype (``[2, 3, H]``, ``[3, H]``, channels-first ``[2, H, 5, 7]``
and channels-last ``[2, 5, 7, H]``; each probe the original accepts), with
the model's own parameters; a replacement that fails on such a probe, or
differs beyond the dtype's tolerance (:data:`PROBE_TOLERANCE`), is refused
(:class:`PatchError`, naming the module and the error measured) or, with
``patch(on_mismatch="skip")``, left out with a warning and listed in
``model.opbridge_patch_summary.skipped``.
"""

from __future__ import annotations

import warnings
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
class Skipped:
    path: str
    rule: str
    reason: str


class PatchError(ValueError):
    """A replacement that would change the model's numbers."""


# (rtol, atol) of the probe comparison, by the parameters' dtype.
PROBE_TOLERANCE = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}
_PROBE_OTHER = ((2, 5, 7), (5, 7))


@dataclass
class PatchSummary:
    """What ``patch`` replaced (or ``unpatch`` restored), in walk order, and
    what it left (``skipped``: a replacement refused by its probe check)."""

    replaced: list[Replacement] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.replaced)

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for r in self.replaced:
            found[r.rule] = found.get(r.rule, 0) + 1
        return found

    def __str__(self) -> str:
        if not self.replaced:
            lines = ["opbridge.patch: nothing replaced"]
        else:
            lines = [f"opbridge.patch: {len(self.replaced)} module(s) replaced"]
        for r in self.replaced:
            old, new = type(r.original).__name__, type(r.replacement).__name__
            lines.append(f"  {r.path}: {old} -> {new} ({r.rule})")
        if self.skipped:
            lines.append(f"left ({len(self.skipped)}):")
            lines += [f"  {s.path} ({s.rule}): {s.reason}" for s in self.skipped]
        return "\n".join(lines)


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


def torch_layernorm_rule(parent: nn.Module, name: str, child: nn.Module):
    """``torch.nn.LayerNorm`` over the last dimension -> ``opbridge.nn.LayerNorm``
    (the same weight and bias parameters, or none)."""
    if type(child) is not nn.LayerNorm or len(child.normalized_shape) != 1:
        return None
    new = obnn.LayerNorm(
        child.normalized_shape[0],
        eps=child.eps,
        elementwise_affine=child.weight is not None,
        bias=child.bias is not None,
        device="meta",
    )
    _share(new, "weight", child.weight)
    _share(new, "bias", child.bias)
    return {name: new}


torch_layernorm_rule.rule_name = "torch.nn.LayerNorm"


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

DEFAULT_RULES: tuple[Rule, ...] = (torch_rmsnorm_rule, torch_layernorm_rule, linear_gelu_rule)


def _check_module(function: str, model: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"opbridge.{function}: model must be a torch.nn.Module, got {type(model).__name__}"
            + (f" {model!r}" if isinstance(model, str) else "")
        )


def _feature_size(modules: list[nn.Module]) -> int:
    first = modules[0]
    if isinstance(first, nn.Linear):
        return first.in_features
    for param in first.parameters(recurse=False):
        if param.dim() == 1:
            return param.shape[0]
    for param in first.parameters():
        if param.dim() >= 1:
            return param.shape[-1]
    return 8


def _dtype(modules: list[nn.Module]) -> torch.dtype | None:
    for module in modules:
        for param in module.parameters():
            if param.is_meta:
                return None
            if param.is_floating_point():
                return param.dtype
    return torch.get_default_dtype()


def _probe(originals: list[nn.Module], replacements: list[nn.Module]) -> str | None:
    """None when the replacements compute what the originals do on every
    probe the originals accept; else what differs."""
    dtype = _dtype(originals)
    if dtype is None:
        return None  # meta parameters: nothing to run
    size = _feature_size(originals)
    rtol, atol = PROBE_TOLERANCE.get(dtype, PROBE_TOLERANCE[torch.float32])
    generator = torch.Generator().manual_seed(0)
    shapes = [(2, 3, size), (3, size), (2, size, *_PROBE_OTHER[1]), (*_PROBE_OTHER[0], size)]
    device = next((p.device for m in originals for p in m.parameters()), torch.device("cpu"))
    for shape in shapes:
        x = torch.randn(shape, generator=generator, dtype=torch.float32).to(device, dtype)
        try:
            with torch.no_grad():
                want = nn.Sequential(*originals)(x)
        except Exception:
            continue  # not an input the original takes
        try:
            with torch.no_grad():
                got = nn.Sequential(*replacements)(x)
        except Exception as error:
            lines = str(error).strip().splitlines()
            return (
                f"on a probe of shape {list(shape)} the original ran, the replacement raised: "
                f"{lines[0] if lines else type(error).__name__}"
            )
        if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
            continue  # tuple outputs: compared by the caller's tests, not here
        if got.shape != want.shape:
            return (
                f"on a probe of shape {list(shape)} the output shape is {list(got.shape)}, "
                f"the original's {list(want.shape)}"
            )
        error = (got.double() - want.double()).abs()
        bound = atol + rtol * want.double().abs()
        if not bool((error <= bound).all()):
            return (
                f"on a probe of shape {list(shape)} ({str(dtype).removeprefix('torch.')}) the "
                f"outputs differ by up to {error.max().item():.3g} (tolerance {atol:g} + "
                f"{rtol:g} * |x|)"
            )
    return None  # also when no probe fits the original: nothing to compare


def patch(
    model: nn.Module, *, rules: list[Rule] | None = None, on_mismatch: str = "refuse"
) -> nn.Module:
    """Replaces supported modules of ``model`` in place with opbridge ones and
    returns ``model``.

    Built-in rules: ``torch.nn.RMSNorm``; ``torch.nn.LayerNorm`` over the last
    dimension; ``nn.GELU`` directly after a biased
    ``nn.Linear`` in an ``nn.Sequential``. ``rules`` are tried first (e.g.
    ``rms_norm_rule(LlamaRMSNorm)``). The model itself (the root) is never
    replaced. Each replacement is checked on probe inputs (see the module's
    documentation): a mismatch raises :class:`PatchError`
    (``on_mismatch="refuse"``, the default; nothing is replaced then) or
    leaves that module as it was with a warning (``"skip"``). What was
    replaced and left: ``model.opbridge_patch_summary`` (a
    :class:`PatchSummary`; print it for a table).
    """
    _check_module("patch", model)
    if on_mismatch not in ("refuse", "skip"):
        raise ValueError(
            f"opbridge.patch: on_mismatch must be 'refuse' or 'skip', got {on_mismatch!r}"
        )
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
    start = len(records)

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
                order = [n for n in parent._modules if n in changes]
                mismatch = _probe([parent._modules[n] for n in order], [changes[n] for n in order])
                if mismatch is not None:
                    path = prefix + name
                    message = (
                        f"opbridge.patch: {path} ({type(child).__name__}) by rule "
                        f"'{_rule_name(rule)}' would change the model's numbers: {mismatch}"
                    )
                    if on_mismatch == "refuse":
                        _restore(records[start:])
                        del records[start:]
                        raise PatchError(message)
                    warnings.warn(message + "; left as it was", stacklevel=3)
                    summary.skipped.append(Skipped(path, _rule_name(rule), mismatch))
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


def _restore(records: list) -> list[Replacement]:
    restored = []
    for parent, child_name, record in reversed(records):
        if parent._modules.get(child_name) is record.replacement:
            setattr(parent, child_name, record.original)
            restored.append(record)
    return restored


def unpatch(model: nn.Module) -> nn.Module:
    """Puts back every module that ``patch`` replaced in ``model`` (whose
    parameters were shared, so training since is kept) and returns ``model``;
    ``model.opbridge_patch_summary`` then lists what was restored."""
    _check_module("unpatch", model)
    records = getattr(model, _RECORD_ATTR, None) or []
    summary = PatchSummary(replaced=_restore(records))
    records.clear()
    object.__setattr__(model, SUMMARY_ATTR, summary)
    return model
