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

from torch import nn

from opbridge.patching import fused
from opbridge.patching.probe import PROBE_TOLERANCE, differs, probe, probing
from opbridge.patching.rules import (
    DEFAULT_RULES,
    Rule,
    _rule_name,
    layernorm_subclass_rule,
    linear_gelu_rule,
    rms_norm_like_rule,
    rms_norm_rule,
    torch_layernorm_rule,
    torch_rmsnorm_rule,
)
from opbridge.patching.summary import (
    SUMMARY_ATTR,
    Leave,
    PatchError,
    PatchSummary,
    Replacement,
    Skipped,
)

__all__ = [
    "DEFAULT_RULES",
    "PROBE_TOLERANCE",
    "SUMMARY_ATTR",
    "Leave",
    "PatchError",
    "PatchSummary",
    "Replacement",
    "Rule",
    "Skipped",
    "differs",
    "layernorm_subclass_rule",
    "linear_gelu_rule",
    "patch",
    "probing",
    "rms_norm_like_rule",
    "rms_norm_rule",
    "torch_layernorm_rule",
    "torch_rmsnorm_rule",
    "unpatch",
]

_RECORD_ATTR = "_opbridge_patches"


def _check_module(function: str, model: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"opbridge.{function}: model must be a torch.nn.Module, got {type(model).__name__}"
            + (f" {model!r}" if isinstance(model, str) else "")
        )


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
    ``forwards=True``, fused forwards (:mod:`opbridge.patching.fused`): residual add
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
                mismatch = probe([parent._modules[n] for n in order], [changes[n] for n in order])
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
    one (see :mod:`opbridge.patching.fused`), each checked on a probe."""
    for path, module in list(model.named_modules()):
        if module is model:
            continue
        try:
            found = fused.find(module)
        except Leave as why:
            summary.left.append(Skipped(path, fused.rule_of(module), str(why)))
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
