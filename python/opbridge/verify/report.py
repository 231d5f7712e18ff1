"""What a verification found: the checks, runs and per-layer results, the
list of failures, and the report as JSON."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from opbridge import runtimes
from opbridge._library import VERSION
from opbridge.verify.comparison import Comparison, describe, format_error
from opbridge.verify.status import (
    FAIL,
    NOT_APPLICABLE,
    PASS,
    WARN,
    Check,
    level_text,
    one_line,
)

__all__ = ["FAIL", "NOT_APPLICABLE", "PASS", "WARN", "Check", "one_line"]  # and what follows


@dataclass
class Cell:
    """One run: an input case at one optimization level, all outputs compared."""

    case: str
    batch: int | None
    level: str
    status: str
    max_abs_err: float
    max_rel_err: float
    # Against the same case at the runtime's base level (None for that level itself).
    max_abs_diff_vs_base: float | None = None
    error: str = ""
    # Against the reference model's outputs (None without a reference).
    reference_status: str | None = None
    reference_max_abs_err: float | None = None
    reference_max_rel_err: float | None = None


@dataclass
class LayerResult:
    """A named submodule's output, PyTorch against the ONNX value mapped to it."""

    module: str
    onnx_values: list[str]
    status: str  # pass, fail, or n/a when it could not be compared
    # The worst comparison over every case and level that ran layer by layer.
    worst: Comparison | None = None
    case: str = ""
    level: str = ""
    detail: str = ""


@dataclass
class OperatorResult:
    """One call of a library operator: its output in PyTorch against the ONNX
    value of the call's node."""

    op: str  # "<namespace>::<name>"
    call: int  # 1 for the op's first call, 2 for the next, ... (in PyTorch's order)
    module: str  # the module whose forward made the call ("" for the model's own)
    onnx_values: list[str]
    status: str  # pass, fail, or n/a when it could not be compared
    # The worst comparison over every case and level that ran layer by layer.
    worst: Comparison | None = None
    case: str = ""
    level: str = ""
    detail: str = ""
    # What the runtime ran for the call's node: KERNEL, BODY or UNKNOWN ("" where
    # verify did not look: a node without a fallback body runs its kernel).
    ran: str = ""

    @property
    def label(self) -> str:
        """``acme::swiglu_clamp (call 1, in module mlp)``."""
        where = f"in module {self.module}" if self.module else "in the model's own forward"
        return f"{self.op} (call {self.call}, {where})"


# What the runtime ran for a library node with a fallback body (KernelRun.ran).
KERNEL = "kernel"
BODY = "body"
UNKNOWN = "unknown"


@dataclass
class KernelRun:
    """A library node that has a model-local function (route ``function``: a
    fallback body) and whose library is loaded: whether the runtime ran the
    library's kernel for it, as it should, or the body, by the runtime's own
    profiling (:attr:`opbridge.runtimes.Runtime.library_kernels`)."""

    node: str  # the node's name ("<op type>_<k>" where the graph left it unnamed)
    onnx_op: str  # "<domain>::<op type>"
    op: str  # "<namespace>::<name>"
    call: int  # 1 for the op's first node in the graph, 2 for the next, ...
    outputs: list[str]
    ran: str  # KERNEL, BODY or UNKNOWN
    status: str  # pass (the kernel ran), fail (the body did), n/a (unknown)

    @property
    def label(self) -> str:
        """``acme::soft_cap call 1 (node 'node_soft_cap', com.example.acme::SoftCap)``."""
        return f"{self.op} call {self.call} (node {self.node!r}, {self.onnx_op})"


@dataclass
class ReferenceRun:
    """One input case: the patched PyTorch model's outputs against the reference model's."""

    case: str
    batch: int | None
    status: str
    max_abs_err: float
    max_rel_err: float
    error: str = ""


@dataclass
class Agreement:
    """One of the comparisons a reference model brings, over every run: its
    name (``ONNX_VS_TORCH``, ``TORCH_VS_REFERENCE`` or ``ONNX_VS_REFERENCE``),
    result, largest errors and the run where the error was largest."""

    name: str
    status: str
    max_abs_err: float
    max_rel_err: float
    runs: int
    failed: int
    worst: str = ""  # "draw 1 at enable_all" (ONNX) or "draw 1" (PyTorch)


@dataclass
class ReferenceLayer:
    """A submodule present under the same name in the patched and the reference
    model: the patched module's output against the reference module's, on the
    example inputs."""

    module: str
    patched_type: str
    reference_type: str
    # pass, fail, warn (differs, but an enclosing module agrees) or n/a
    status: str
    worst: Comparison | None = None
    detail: str = ""


# The three comparisons a reference model brings (Agreement.name).
ONNX_VS_TORCH = "onnx vs patched torch"
TORCH_VS_REFERENCE = "patched torch vs reference"
ONNX_VS_REFERENCE = "onnx vs reference"

# Where a divergence lies (VerificationReport.diverges_in).
IN_PATCHING = "torch patching"
IN_EXPORT = "export/runtime"
IN_BOTH = "torch patching and export/runtime"
IN_ACCUMULATION = "accumulated error"


@dataclass
class VerificationReport:
    """What :func:`opbridge.verify` found; ``passed`` is True only when everything agreed."""

    passed: bool
    route: str
    rtol: float  # for every output dtype but float64
    atol: float
    model_source: str  # "exported (...)" or where the given model came from
    structure: list[Check] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    outputs_info: list[dict] = field(default_factory=list)
    # Final outputs: the example inputs at the runtime's default level.
    outputs: list[Comparison] = field(default_factory=list)
    levels: list[str] = field(default_factory=list)
    # The runtime verified in, its level that runs the graph as exported (the
    # others are compared with it) and the one the final outputs come from.
    runtime: str = runtimes.DEFAULT
    # (Runtime.base_level and Runtime.default_level, set by verify).
    base_level: str = ""
    default_level: str = ""
    cells: list[Cell] = field(default_factory=list)
    fusion_problems: list[str] = field(default_factory=list)
    batch_sweep: str = ""  # "ran: 1, 4, 16" or why it did not apply
    layer_mapping: str = ""  # "available (...)" or why layer-by-layer did not run
    layers: list[LayerResult] = field(default_factory=list)
    first_divergence: str | None = None
    # Operator by operator: every call of a library operator (in PyTorch's
    # order), what maps them to ONNX values, and the first that diverges
    # (its OperatorResult.label).
    operator_mapping: str = ""
    operators: list[OperatorResult] = field(default_factory=list)
    first_divergence_op: str | None = None
    # The library nodes with a fallback body (route "function"): whether the
    # runtime ran each one's kernel, and the line saying how that is known
    # (or why it is not).
    kernel_check: str = ""
    kernels: list[KernelRun] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # For float64 outputs (the same as rtol/atol when those were given).
    rtol_float64: float = 0.0
    atol_float64: float = 0.0
    # What the exported graph's inputs make dynamic (dim_param, not dim_value),
    # whatever the export asked for, and the line that says so.
    dynamic_batch: bool = False
    dynamic_sequence: bool = False
    shapes: str = ""
    sequence_sweep: str = ""  # "ran: 8, 16" or why it did not apply
    warnings: list[str] = field(default_factory=list)
    # Against a reference model (reference=): where it came from (None without
    # one), each case in PyTorch, the three comparisons, where a divergence
    # lies, and same-named modules layer by layer.
    reference: str | None = None
    reference_runs: list[ReferenceRun] = field(default_factory=list)
    agreement: list[Agreement] = field(default_factory=list)
    diverges_in: str | None = None  # IN_PATCHING, IN_EXPORT, IN_BOTH, IN_ACCUMULATION
    reference_layer_mapping: str = ""
    reference_layers: list[ReferenceLayer] = field(default_factory=list)
    reference_first_divergence: str | None = None
    onnx_model: Any = field(default=None, repr=False)

    @property
    def max_abs_err(self) -> float:
        """The largest final-output error over every run (case and level)."""
        return max((c.max_abs_err for c in self.cells), default=float("nan"))

    @property
    def layers_compared(self) -> int:
        return sum(r.worst is not None for r in self.layers)

    @property
    def first_divergence_layer(self) -> LayerResult | None:
        return next((r for r in self.layers if r.module == self.first_divergence), None)

    @property
    def first_divergence_call(self) -> OperatorResult | None:
        return next((r for r in self.operators if r.label == self.first_divergence_op), None)

    @property
    def reference_first_divergence_layer(self) -> ReferenceLayer | None:
        return next(
            (r for r in self.reference_layers if r.module == self.reference_first_divergence),
            None,
        )

    def divergence(self) -> str | None:
        """Which side diverges, in a sentence (None without a reference or a divergence)."""
        if self.diverges_in is None:
            return None
        if self.diverges_in == IN_PATCHING:
            return (
                "the divergence is in the torch patching, not the export: the patched PyTorch "
                "model differs from the reference, and ONNX Runtime agrees with the patched model"
            )
        if self.diverges_in == IN_EXPORT:
            return (
                "the divergence is in the export/runtime: the patched PyTorch model agrees with "
                "the reference, ONNX Runtime does not agree with the patched model"
            )
        if self.diverges_in == IN_BOTH:
            return (
                "the divergence is in the torch patching (the patched PyTorch model differs from "
                "the reference) and also in the export/runtime (ONNX Runtime differs from the "
                "patched model)"
            )
        return (
            "ONNX Runtime is within tolerance of the patched model and the patched model of "
            "the reference, but ONNX Runtime is not within tolerance of the reference: the two "
            "errors add up"
        )

    def failures(self) -> list[str]:
        """One line per kind of failure, most telling first; a failure repeated
        with the same message is one line with its count ("(x7)")."""
        lines = [f"structure: {c.name}: {c.detail}" for c in self.structure if c.status == FAIL]
        lines += [f"final output {c.name}: {describe(c)}" for c in self.outputs if not c.passed]
        crashed = [c for c in self.cells if c.status == FAIL and c.error]
        lines += counted([(f"run {c.case} at {c.level}", c.error) for c in crashed])
        off = [c for c in self.cells if c.status == FAIL and not c.error]
        if off:
            worst = max(off, key=lambda c: c.max_abs_err)
            lines.append(
                f"runs: {len(off)} of {len(self.cells)} (case, level) runs out of tolerance; "
                f"worst {worst.case} at {worst.level}, max abs err "
                f"{format_error(worst.max_abs_err)}"
            )
        lines += [
            f"fusion problem at {level} ({level_text(self.runtime, level)}): "
            f"results differ from {self.base_level}"
            for level in self.fusion_problems
        ]
        calls = [r for r in self.operators if r.status == FAIL]
        if calls:
            first = calls[0]
            lines.append(
                f"operators: {len(calls)} of {len(self.operators)} calls diverge; first "
                f"{first.label} ({first.case}, {first.level}): {describe(first.worst)}"
            )
        bodies = [k for k in self.kernels if k.status == FAIL]
        if bodies:
            lines.append(
                f"kernels: {len(bodies)} of {len(self.kernels)} library nodes ran their "
                f"model-local function's body instead of the loaded library's kernel in "
                f"{self.runtime} at {self.default_level}: " + "; ".join(k.label for k in bodies)
            )
        diverging = [r for r in self.layers if r.status == FAIL]
        if diverging:
            first = diverging[0]
            lines.append(
                f"layers: {len(diverging)} modules diverge; first {first.module} "
                f"({first.case}, {first.level}): {describe(first.worst)}"
            )
        lines += self._reference_failures()
        lines += [f"error: {e}" for e in self.errors]
        return lines

    def _reference_failures(self) -> list[str]:
        lines = counted([(f"reference, {r.case}", r.error) for r in self.reference_runs if r.error])
        for check in self.agreement:
            if check.status != FAIL or check.name == ONNX_VS_TORCH:
                continue  # ONNX Runtime against the patched model: the lines above
            lines.append(
                f"{check.name}: {check.failed} of {check.runs} runs out of tolerance; worst "
                f"{check.worst}, max abs err {format_error(check.max_abs_err)}, max rel err "
                f"{format_error(check.max_rel_err)}"
            )
        diverging = [r for r in self.reference_layers if r.status == FAIL]
        if diverging:
            first = diverging[0]
            lines.append(
                f"layers vs reference: {len(diverging)} modules diverge; first {first.module} "
                f"({first.patched_type} patched, {first.reference_type} in the reference): "
                f"{describe(first.worst)}"
            )
        sentence = self.divergence()
        if sentence is not None:
            lines.append(sentence)
        return lines

    # -------------------------------------------------------------- output

    def to_dict(self) -> dict:
        """Everything in the report as JSON-ready values (non-finite floats as strings)."""
        data = {
            f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name != "onnx_model"
        }
        data["operators"] = [{**_json_safe(_plain(r)), "label": r.label} for r in self.operators]
        data["kernels"] = [{**_plain(k), "label": k.label} for k in self.kernels]
        data["opbridge_version"] = VERSION
        data["failures"] = self.failures()
        return _json_safe(data)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def format(self) -> str:
        """The report as a terminal table."""
        from opbridge.verify.formatting import format_report

        return "\n".join(format_report(self))

    def __str__(self) -> str:
        return self.format()

    def plot(self, path: str | os.PathLike) -> None:
        """Per-layer error on a log scale, first divergence marked (PNG, needs matplotlib)."""
        from opbridge.verify.formatting import plot

        plot(self, Path(path))


def counted(entries: list[tuple[str, str]]) -> list[str]:
    """``(where, message)`` pairs as lines, one per distinct message in the
    order first seen: ``where: message``, or for a message seen n > 1 times
    ``where and n-1 more: message (xn)`` (``where`` being the first)."""
    seen: dict[str, list] = {}
    for where, message in entries:
        if message in seen:
            seen[message][1] += 1
        else:
            seen[message] = [where, 1]
    lines = []
    for message, (where, count) in seen.items():
        if count == 1:
            lines.append(f"{where}: {message}")
        else:
            lines.append(f"{where} and {count - 1} more: {message} (x{count})")
    return lines


def _plain(value: Any) -> Any:
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
