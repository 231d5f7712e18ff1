"""A verification report as a terminal table, and its per-layer error plot."""

from __future__ import annotations

import math
from pathlib import Path

from opbridge.verify.comparison import Stats, describe, format_error
from opbridge.verify.status import FAIL, NOT_APPLICABLE, PASS, WARN, level_text
from opbridge.verify.structure import shape_text

# The functions here take an opbridge.verify.VerificationReport, whose
# format() and plot() call them: that module is not imported here.


def format_report(report) -> list[str]:
    """The report's lines: structure, final outputs, sweeps, layers, operator
    calls, result."""
    verdict = "PASS" if report.passed else "FAIL"
    tolerance = f"rtol {report.rtol:g}, atol {report.atol:g}"
    if (report.rtol_float64, report.atol_float64) != (report.rtol, report.atol):
        tolerance += f" (float64: {report.rtol_float64:g}, {report.atol_float64:g})"
    lines = [
        f"opbridge verify: {verdict}  (route {report.route}, {tolerance}; "
        f"model {report.model_source})",
        "",
        "Structure",
    ]
    lines += _table(
        ["check", "result", "detail"],
        [[c.name, _mark(c.status), c.detail] for c in report.structure],
    )
    lines.append(f"shapes: {report.shapes}")
    lines += [f"WARNING: {w}" for w in report.warnings]
    lines += ["", *_outputs_section(report), "", *_sweeps_section(report), ""]
    lines += _layers_section(report)
    lines += ["", *_operators_section(report)]
    if report.kernel_check:
        lines += ["", *_kernels_section(report)]
    if report.reference is not None:
        lines += ["", *_reference_section(report)]
    failures = report.failures()
    lines += ["", f"Result: {verdict}" + (f" ({len(failures)} failures)" if failures else "")]
    lines += [f"  - {line}" for line in failures]
    return lines


def _outputs_section(report) -> list[str]:
    lines = [f"Final outputs (example inputs, {report.default_level}) vs PyTorch"]
    if not report.outputs:
        return [*lines, "  (not run)"]
    rows = [
        [
            c.name,
            shape_text(c.shape),
            _mark(PASS if c.passed else FAIL),
            format_error(c.max_abs_err),
            format_error(c.max_rel_err),
            f"{c.cosine:.6f}",
            _range(c.torch),
            _range(c.ort),
        ]
        for c in report.outputs
    ]
    headers = ["output", "shape", "result", "max abs", "max rel", "cosine"]
    headers += ["torch min/max/mean/var", "ORT min/max/mean/var"]
    return lines + _table(headers, rows)


def _sweeps_section(report) -> list[str]:
    lines = ["Sweeps: max abs error vs PyTorch, every case at every optimization level"]
    cases = list(dict.fromkeys((c.case, c.batch) for c in report.cells))
    by_key = {(c.case, c.level): c for c in report.cells}
    rows = []
    for case, batch in cases:
        row = [case, "-" if batch is None else str(batch)]
        for level in report.levels:
            cell = by_key.get((case, level))
            if cell is None:
                row.append("-")
            elif cell.error and not math.isfinite(cell.max_abs_err):
                row.append("ERROR")
            else:
                row.append(
                    format_error(cell.max_abs_err) + ("" if cell.status == PASS else " FAIL")
                )
        rows.append(row)
    lines += _table(["case", "batch", *report.levels], rows)
    lines.append(f"batch sweep: {report.batch_sweep}")
    lines.append(f"sequence sweep: {report.sequence_sweep}")
    for level in report.fusion_problems:
        worst = max(
            (c.max_abs_diff_vs_base or 0.0 for c in report.cells if c.level == level),
            default=0.0,
        )
        lines.append(
            f"FUSION PROBLEM at {level} ({level_text(report.runtime, level)}): "
            f"results differ from {report.base_level} by up to {format_error(worst)}"
        )
    if not report.fusion_problems:
        lines.append(f"optimization levels: consistent with {report.base_level}")
    return lines


def _result_cells(r, first: bool) -> list[str]:
    """A layer's or an operator call's row after its name: the ONNX values,
    the result, the worst comparison's errors and case, the marker."""
    c = r.worst
    return [
        ",".join(r.onnx_values) or "-",
        _mark(r.status),
        format_error(c.max_abs_err) if c else "-",
        format_error(c.max_rel_err) if c else "-",
        f"{c.cosine:.6f}" if c else "-",
        r.case if c else r.detail,
        "<- first divergence" if first else "",
    ]


def _layers_section(report) -> list[str]:
    lines = [f"Layer by layer: {report.layer_mapping}"]
    if report.layers:
        rows = []
        for r in report.layers:
            first = r.module == report.first_divergence
            rows.append([r.module, *_result_cells(r, first)])
        lines += _table(
            ["module", "onnx value", "result", "max abs", "max rel", "cosine", "worst case", ""],
            rows,
        )
    if report.first_divergence:
        layer = report.first_divergence_layer
        lines.append(
            f"first divergence: {report.first_divergence} ({layer.case}, {layer.level}): "
            f"{describe(layer.worst)}"
        )
        if report.first_divergence_op:
            lines.append(
                f"a library operator call diverges too: first {report.first_divergence_op} "
                "(operator by operator, below)"
            )
    return lines


def _operators_section(report) -> list[str]:
    lines = [f"Operator by operator: {report.operator_mapping}"]
    if report.operators:
        rows = []
        for r in report.operators:
            first = r.label == report.first_divergence_op
            rows.append([r.op, str(r.call), r.module or "-", *_result_cells(r, first)])
        headers = ["operator", "call", "module", "onnx value", "result", "max abs", "max rel"]
        lines += _table([*headers, "cosine", "worst case", ""], rows)
    first = report.first_divergence_call
    if first is not None:
        lines.append(
            f"first divergence: {first.label} ({first.case}, {first.level}): "
            f"{describe(first.worst)}"
        )
    return lines


def _kernels_section(report) -> list[str]:
    """Each library node with a fallback body: the library's kernel or the body."""
    lines = [f"Library kernels (nodes with a fallback body): {report.kernel_check}"]
    rows = [[k.op, str(k.call), k.node, k.onnx_op, k.ran, _mark(k.status)] for k in report.kernels]
    if rows:
        lines += _table(["operator", "call", "node", "onnx op", "ran", "result"], rows)
    return lines


def _reference_section(report) -> list[str]:
    lines = [f"Against the reference model ({report.reference})"]
    rows = [
        [
            a.name,
            _mark(a.status),
            format_error(a.max_abs_err),
            format_error(a.max_rel_err),
            f"{a.failed} of {a.runs}",
            a.worst,
        ]
        for a in report.agreement
    ]
    lines += _table(["comparison", "result", "max abs", "max rel", "failed", "worst run"], rows)
    sentence = report.divergence()
    lines.append(sentence if sentence is not None else "no divergence: all three comparisons agree")
    lines += ["", f"Layer by layer, patched vs reference: {report.reference_layer_mapping}"]
    shown = [r for r in report.reference_layers if r.status != PASS]
    if shown:
        lines.append("modules that do not simply agree (the others agree):")
        rows = []
        for r in shown:
            c = r.worst
            marker = "<- first divergence" if r.module == report.reference_first_divergence else ""
            rows.append(
                [
                    r.module,
                    r.patched_type,
                    r.reference_type,
                    _mark(r.status),
                    format_error(c.max_abs_err) if c else "-",
                    format_error(c.max_rel_err) if c else "-",
                    r.detail,
                    marker,
                ]
            )
        headers = ["module", "patched", "reference", "result", "max abs", "max rel", "detail", ""]
        lines += _table(headers, rows)
    if report.reference_first_divergence:
        layer = report.reference_first_divergence_layer
        lines.append(
            f"first divergence vs reference: {layer.module} ({layer.patched_type} patched, "
            f"{layer.reference_type} in the reference): {describe(layer.worst)}"
        )
    return lines


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    lines = [line, "  ".join("-" * w for w in widths).rstrip()]
    for row in rows:
        cells = zip(row, widths, strict=True)
        lines.append("  ".join(str(x).ljust(w) for x, w in cells).rstrip())
    return lines


def _mark(status: str) -> str:
    return {PASS: "ok", FAIL: "FAIL", WARN: "warn", NOT_APPLICABLE: "n/a"}[status]


def _range(s: Stats | None) -> str:
    if s is None:
        return "-"
    return f"{s.min:.3g}/{s.max:.3g}/{s.mean:.3g}/{s.var:.3g}"


def plot(report, path: Path) -> None:
    """Per-layer error on a log scale, first divergence marked (PNG, needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Log axes cannot show an exact zero: those sit on the floor.
    floor, ratio_floor = 1e-10, 1e-4
    compared = [r for r in report.layers if r.worst is not None]
    names = [r.module for r in compared] + [f"output: {c.name}" for c in report.outputs]
    results = [r.worst for r in compared] + list(report.outputs)
    passed = [r.status == PASS for r in compared] + [c.passed for c in report.outputs]

    def clip(value: float, low: float) -> float:
        return max(value, low) if math.isfinite(value) else 1e6

    fig, (ax_err, ax_ratio) = plt.subplots(
        2, 1, figsize=(max(8, 0.45 * len(names) + 3), 8), sharex=True
    )
    x = list(range(len(names)))
    colors = ["tab:green" if ok else "tab:red" for ok in passed]
    errors = [clip(c.max_abs_err, floor) for c in results]
    ax_err.plot(x, errors, "-", color="tab:blue", zorder=1)
    ax_err.scatter(x, errors, c=colors, zorder=2, label="max abs err (red: fails)")
    ax_err.axhline(report.atol, color="gray", linestyle=":", label=f"atol {report.atol:g}")
    ax_err.set_yscale("log")
    ax_err.set_ylabel("max abs error vs PyTorch")
    ax_err.legend(loc="best", fontsize=8)
    ratios = [clip(c.tolerance_ratio, ratio_floor) for c in results]
    ax_ratio.bar(x, ratios, color=colors)
    ax_ratio.axhline(1.0, color="black", linestyle="--", label="tolerance: atol + rtol*|torch|")
    ax_ratio.set_yscale("log")
    ax_ratio.set_ylim(bottom=ratio_floor)
    ax_ratio.set_ylabel("max error / tolerance")
    ax_ratio.legend(loc="best", fontsize=8)
    if report.first_divergence in names:
        at = names.index(report.first_divergence)
        for ax in (ax_err, ax_ratio):
            ax.axvline(at, color="tab:red", linewidth=2, alpha=0.5)
        ax_err.annotate(
            f"first divergence: {report.first_divergence}",
            (at, errors[at]),
            textcoords="offset points",
            xytext=(8, -14),
            color="tab:red",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
        )
    ax_ratio.set_xticks(x)
    ax_ratio.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    verdict = "PASS" if report.passed else "FAIL"
    title = f"opbridge verify ({report.route} route): {verdict}"
    if not compared:
        title += f" - layer by layer {report.layer_mapping.split(':')[0]}"
    ax_err.set_title(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
