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

import contextlib
import re
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
    """One change ``patch`` made: ``original`` -> ``replacement`` at ``path``.
    For a changed forward (``classes`` set: the module's class before and
    after) the module stays the same object and ``original`` is
    ``replacement``."""

    path: str  # dotted name of the replaced child in the model
    rule: str
    original: nn.Module
    replacement: nn.Module
    classes: tuple[type, type] | None = None

    def describe(self) -> str:
        if self.classes is not None:
            return f"{self.classes[0].__name__} -> fused forward"
        return f"{type(self.original).__name__} -> {type(self.replacement).__name__}"


@dataclass
class Skipped:
    path: str
    rule: str
    reason: str


class PatchError(ValueError):
    """A replacement that would change the model's numbers."""


class Leave(Exception):
    """Raised by a rule for a module it recognizes but does not replace: the
    reason goes to ``opbridge_patch_summary.left``."""


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
    what it left: ``skipped``, a replacement refused by its probe check
    (``on_mismatch="skip"``); ``left``, a module a rule recognized but could
    not replace (the reason says why)."""

    replaced: list[Replacement] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    left: list[Skipped] = field(default_factory=list)

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
            lines.append(f"  {r.path}: {r.describe()} ({r.rule})")
        left = self.skipped + self.left
        if left:
            lines.append(f"left ({len(left)}):")
            lines += [f"  {s.path} ({s.rule}): {s.reason}" for s in left]
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
    dtype = _dtype([parent])
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


@contextlib.contextmanager
def probing(*modules: nn.Module):
    """No autograd, and ``modules`` (with their submodules) in eval mode for
    a probe (dropout off), their training flags restored after."""
    modes = [(m, m.training) for root in modules for m in root.modules()]
    try:
        for m, _ in modes:
            m.training = False
        with torch.no_grad():
            yield
    finally:
        for m, training in modes:
            m.training = training


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
    generator = torch.Generator().manual_seed(0)
    shapes = [(2, 3, size), (3, size), (2, size, *_PROBE_OTHER[1]), (*_PROBE_OTHER[0], size)]
    device = next((p.device for m in originals for p in m.parameters()), torch.device("cpu"))
    for shape in shapes:
        x = torch.randn(shape, generator=generator, dtype=torch.float32).to(device, dtype)
        try:
            with probing(*originals):
                want = nn.Sequential(*originals)(x)
        except Exception:
            continue  # not an input the original takes
        try:
            with probing(*replacements):
                got = nn.Sequential(*replacements)(x)
        except Exception as error:
            lines = str(error).strip().splitlines()
            return (
                f"on a probe of shape {list(shape)} the original ran, the replacement raised: "
                f"{lines[0] if lines else type(error).__name__}"
            )
        if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
            continue  # tuple outputs: compared by the caller's tests, not here
        mismatch = differs(got, want)
        if mismatch is not None:
            kind = str(dtype).removeprefix("torch.")
            return f"on a probe of shape {list(shape)} ({kind}) {mismatch}"
    return None  # also when no probe fits the original: nothing to compare


def differs(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """None when ``got`` matches ``want`` within :data:`PROBE_TOLERANCE` for
    ``want``'s dtype, else how they differ."""
    rtol, atol = PROBE_TOLERANCE.get(want.dtype, PROBE_TOLERANCE[torch.float32])
    if got.shape != want.shape:
        return f"the output shape is {list(got.shape)}, the original's {list(want.shape)}"
    error = (got.double() - want.double()).abs()
    if not bool((error <= atol + rtol * want.double().abs()).all()):
        return (
            f"the outputs differ by up to {error.max().item():.3g} (tolerance {atol:g} + "
            f"{rtol:g} * |x|)"
        )
    return None


def patch(
    model: nn.Module,
    *,
    rules: list[Rule] | None = None,
    on_mismatch: str = "refuse",
    forwards: bool = True,
) -> nn.Module:
    """Replaces supported modules of ``model`` in place with opbridge ones and
    returns ``model``.

    Module rules (first the caller's ``rules``, e.g.
    ``rms_norm_rule(MyNorm)``, then the built-in ones): ``torch.nn.RMSNorm``
    and ``torch.nn.LayerNorm`` over the last dimension; modules named like
    an RMS norm (:func:`rms_norm_like_rule`: Hugging Face's Llama, Mistral,
    Qwen, Gemma, Phi-3 and T5 norms, q/k norms included); a GELU applied to
    a biased linear layer (:func:`linear_gelu_rule`). Then, with
    ``forwards=True``, fused forwards (:mod:`opbridge.fusions`): residual add
    + norm in Hugging Face decoder and encoder layers, and their rotary
    embedding on opbridge's kernel. The model itself (the root) is never
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

    def refuse(where: str, rule_name: str, mismatch: str) -> None:
        message = (
            f"opbridge.patch: {where} by rule '{rule_name}' would change the model's "
            f"numbers: {mismatch}"
        )
        if on_mismatch == "refuse":
            _restore(records[start:])
            del records[start:]
            raise PatchError(message + " (patch(..., on_mismatch='skip') leaves it instead)")
        warnings.warn(message + "; left as it was", stacklevel=4)
        summary.skipped.append(Skipped(where.split(" ")[0], rule_name, mismatch))

    def walk(parent: nn.Module, prefix: str) -> None:
        replaced: set[str] = set()
        for name in list(parent._modules):
            child = parent._modules[name]
            if child is None or name in replaced:
                continue
            for rule in all_rules:
                try:
                    changes = rule(parent, name, child)
                except Leave as why:
                    summary.left.append(Skipped(prefix + name, _rule_name(rule), str(why)))
                    continue
                if not changes:
                    continue
                order = list(changes)  # the rule's order: the data flows through them in it
                mismatch = _probe([parent._modules[n] for n in order], [changes[n] for n in order])
                if mismatch is not None:
                    refuse(f"{prefix}{name} ({type(child).__name__})", _rule_name(rule), mismatch)
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
    if forwards:
        _fuse_forwards(model, summary, records, refuse)
    object.__setattr__(model, SUMMARY_ATTR, summary)
    return model


def _fuse_forwards(model: nn.Module, summary: PatchSummary, records: list, refuse) -> None:
    """The second pass: modules whose forward opbridge replaces by a fused
    one (see :mod:`opbridge.fusions`), each checked on a probe."""
    from opbridge import fusions

    for path, module in list(model.named_modules()):
        if module is model:
            continue
        try:
            found = fusions.find(module)
        except Leave as why:
            summary.left.append(Skipped(path, fusions.rule_of(module), str(why)))
            continue
        if found is None:
            continue
        rule_name, fused_class, probe = found
        original_class = type(module)
        mismatch = probe(module, fused_class)
        if mismatch is not None:
            refuse(f"{path} ({original_class.__name__})", rule_name, mismatch)
            continue
        module.__class__ = fused_class
        record = Replacement(path, rule_name, module, module, (original_class, fused_class))
        summary.replaced.append(record)
        records.append((module, None, record))


def _restore(records: list) -> list[Replacement]:
    restored = []
    for parent, child_name, record in reversed(records):
        if record.classes is not None:
            if type(parent) is record.classes[1]:
                parent.__class__ = record.classes[0]
                restored.append(record)
            continue
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
