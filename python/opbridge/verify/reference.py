"""Against the user's own model: the patched PyTorch model and ONNX Runtime
each compared with a reference model (typically the model as it was before
``opbridge.patch``), which side diverges, and same-named modules of the two
PyTorch models layer by layer."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from opbridge.verify.comparison import Comparison, Tolerance, compare, worse
from opbridge.verify.layers import record
from opbridge.verify.report import (
    FAIL,
    IN_ACCUMULATION,
    IN_BOTH,
    IN_EXPORT,
    IN_PATCHING,
    NOT_APPLICABLE,
    ONNX_VS_REFERENCE,
    ONNX_VS_TORCH,
    PASS,
    TORCH_VS_REFERENCE,
    WARN,
    Agreement,
    ReferenceLayer,
    VerificationReport,
)
from opbridge.verify.sweeps import to_numpy


def check_reference(model: torch.nn.Module, reference: Any) -> None:
    """Raises when ``reference`` cannot be a reference for ``model``."""
    if not isinstance(reference, torch.nn.Module):
        raise TypeError(
            "opbridge.verify: reference must be a torch.nn.Module (the model as it was before "
            f"patching), got {type(reference).__name__}"
        )
    if reference is model:
        raise ValueError(
            "opbridge.verify: reference is the verified model itself, so they would always "
            "agree; pass the model as it was before patching (opbridge.patch changes the model "
            "in place: keep reference = copy.deepcopy(model) before calling it)"
        )


def compare_outputs(
    got: list[np.ndarray], want: list[np.ndarray], tolerance: Tolerance, names: list[str]
) -> tuple[bool, float, float, str]:
    """``got`` against ``want`` (the reference side), tensor by tensor: whether
    all pass, the largest abs and rel errors, and what differs in kind (the
    number of tensors) if anything."""
    comparisons = [
        compare(name, g, w, *tolerance.of(w)) for name, g, w in zip(names, got, want, strict=False)
    ]
    detail = ""
    if len(got) != len(want):
        detail = f"{len(got)} outputs, {len(want)} in the reference"
    passed = all(c.passed for c in comparisons) and not detail
    max_abs = max((c.max_abs_err for c in comparisons), default=0.0)
    max_rel = max((c.max_rel_err for c in comparisons), default=0.0)
    if detail:
        max_abs = max_rel = math.inf
    return passed, max_abs, max_rel, detail


def summarize(report: VerificationReport) -> None:
    """Fills ``report.agreement`` (the three comparisons over every run) and
    ``report.diverges_in`` from the runs recorded in ``report``."""
    onnx_torch = _agreement(
        ONNX_VS_TORCH,
        [(f"{c.case} at {c.level}", c.status, c.max_abs_err, c.max_rel_err) for c in report.cells],
    )
    torch_reference = _agreement(
        TORCH_VS_REFERENCE,
        [(r.case, r.status, r.max_abs_err, r.max_rel_err) for r in report.reference_runs],
    )
    onnx_reference = _agreement(
        ONNX_VS_REFERENCE,
        [
            (f"{c.case} at {c.level}", c.reference_status, c.reference_max_abs_err,
             c.reference_max_rel_err)
            for c in report.cells
            if c.reference_status is not None
        ],
    )  # fmt: skip
    report.agreement = [onnx_torch, torch_reference, onnx_reference]
    patching = torch_reference.status == FAIL
    export = onnx_torch.status == FAIL
    if patching and export:
        report.diverges_in = IN_BOTH
    elif patching:
        report.diverges_in = IN_PATCHING
    elif export:
        report.diverges_in = IN_EXPORT
    elif onnx_reference.status == FAIL:
        report.diverges_in = IN_ACCUMULATION
    else:
        report.diverges_in = None


def _agreement(name: str, runs: list[tuple[str, str, float, float]]) -> Agreement:
    if not runs:
        return Agreement(name, NOT_APPLICABLE, math.nan, math.nan, 0, 0, "nothing ran")
    failed = [run for run in runs if run[1] != PASS]
    worst = max(failed or runs, key=lambda run: _order(run[2]))
    return Agreement(
        name=name,
        status=FAIL if failed else PASS,
        max_abs_err=max((run[2] for run in runs), key=_order),
        max_rel_err=max((run[3] for run in runs), key=_order),
        runs=len(runs),
        failed=len(failed),
        worst=worst[0],
    )


def _order(value: float) -> float:
    return math.inf if math.isnan(value) else value


def compare_layers(
    model: torch.nn.Module,
    reference: torch.nn.Module,
    args: tuple,
    tolerance: Tolerance,
    outputs_agree: bool,
) -> tuple[list[ReferenceLayer], str | None, str]:
    """Every module under the same name in ``model`` and ``reference`` (that
    ran in both on ``args``), the patched module's output against the
    reference's, in the patched model's execution order; the first that
    diverges; and the report's line saying what was compared.

    A module the patch rearranged is not a divergence: one whose parameter
    moved to a sibling (``nn.Linear`` + ``nn.GELU`` becomes an unbiased
    ``Linear`` and a ``BiasGELU`` holding the bias) is compared at that
    sibling instead (n/a), and one whose difference an enclosing module (or,
    for ``outputs_agree``, the model's outputs) no longer shows is a warning.
    """
    _, patched = record(model, args)
    _, original = record(reference, args)
    patched_modules = dict(model.named_modules())
    reference_modules = dict(reference.named_modules())
    names = [name for name in patched.outputs if name in original.outputs]
    only_patched = len(patched.outputs.keys() - original.outputs.keys())
    only_reference = len(original.outputs.keys() - patched.outputs.keys())
    if not names:
        return (
            [],
            None,
            (
                "unavailable: no submodule runs under the same name in the patched and the "
                f"reference model ({len(patched.outputs)} and {len(original.outputs)} ran)"
            ),
        )

    results: dict[str, ReferenceLayer] = {}
    for name in names:
        layer = ReferenceLayer(
            name,
            _type_name(patched_modules[name]),
            _type_name(reference_modules[name]),
            PASS,
        )
        results[name] = layer
        got, want = patched.outputs[name], original.outputs[name]
        if len(got) != len(want):
            layer.status = NOT_APPLICABLE
            layer.detail = f"{len(got)} output tensors patched, {len(want)} in the reference"
            continue
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            expected = to_numpy(w)
            label = name if len(got) == 1 else f"{name}[{index}]"
            comparison: Comparison = compare(label, to_numpy(g), expected, *tolerance.of(expected))
            if worse(layer.worst, comparison):
                layer.worst = comparison
            if not comparison.passed:
                layer.status = FAIL

    diverged = [name for name in names if results[name].status == FAIL]
    moved = _moved_parameters(patched_modules, reference_modules)
    for name in diverged:
        layer = results[name]
        if name in moved:
            parameter, target = moved[name]
            layer.status = NOT_APPLICABLE
            layer.detail = (
                f"the patch moved its parameter {parameter!r} to {target} "
                f"({_type_name(patched_modules[target])}); compared there"
            )
            continue
        agreeing = next(
            (a for a in _ancestors(name) if a in results and results[a].status == PASS), None
        )
        if agreeing is None and outputs_agree:
            agreeing = "the model's outputs"
        if agreeing is not None:
            layer.status = WARN
            layer.detail = f"differs, but {agreeing} agrees (the patch rearranged it)"

    layers = list(results.values())
    first = next((r.module for r in layers if r.status == FAIL), None)
    line = f"{len(names)} modules under the same name in both models compared (example inputs)"
    if only_patched or only_reference:
        line += (
            f"; {only_patched} only in the patched model, {only_reference} only in the reference"
        )
    return layers, first, line


def _type_name(module: torch.nn.Module) -> str:
    cls = type(module)
    if cls.__module__.startswith("torch."):
        return cls.__name__
    return f"{cls.__module__}.{cls.__name__}"


def _ancestors(name: str) -> list[str]:
    """The enclosing module paths of ``name``, nearest first (without the root)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def _moved_parameters(
    patched: dict[str, torch.nn.Module], reference: dict[str, torch.nn.Module]
) -> dict[str, tuple[str, str]]:
    """Module -> (parameter, sibling) for each module whose parameter, in the
    reference, is no longer its own in the patched model but is a sibling's
    there, with the same value."""
    lost, gained = {}, {}
    for name in patched.keys() & reference.keys():
        if not name:
            continue
        mine = dict(patched[name].named_parameters(recurse=False))
        theirs = dict(reference[name].named_parameters(recurse=False))
        if theirs.keys() - mine.keys():
            lost[name] = {k: v for k, v in theirs.items() if k not in mine}
        if mine.keys() - theirs.keys():
            gained[name] = [v for k, v in mine.items() if k not in theirs]
    moved = {}
    for name, parameters in sorted(lost.items()):
        parent = name.rpartition(".")[0]
        for parameter, value in parameters.items():
            target = next(
                (
                    other
                    for other, candidates in sorted(gained.items())
                    if other != name
                    and other.rpartition(".")[0] == parent
                    and any(_same(value, candidate) for candidate in candidates)
                ),
                None,
            )
            if target is not None:
                moved[name] = (parameter, target)
                break
    return moved


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device or a.is_meta:
        return False
    return bool(torch.equal(a.detach(), b.detach()))
