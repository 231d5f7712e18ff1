"""The benchmark's report: markdown tables and a chart."""

from __future__ import annotations

from pathlib import Path

from opbridge.bench import models as bench_models
from opbridge.bench.cases import IMPLS

# ---------------------------------------------------------------- report


def _key(r: dict) -> tuple:
    return (r["op"], tuple(r["shape"]), r["dtype"], r["threads"], r["pass"])


def is_end_to_end(r: dict) -> bool:
    return r["op"] in bench_models.MODEL_NAMES


def fused_cell(entry: dict | None) -> str:
    if entry is None or "fused" not in entry:
        return "-"
    return ", ".join(entry["fused"]) or "none"


def markdown_table(report: dict) -> str:
    """The operators' table (one row per case; torch columns: the
    alternative's median time over opbridge_torch's, above 1 means opbridge
    is faster; ORT columns: over ort_custom's (ort_standard's, marked
    "standard:", for an operator without a custom route); "% copy" is the share of the
    copy bandwidth reached; the last two columns: ONNX Runtime's own
    operators in ort_contrib's and ort_fused's models; OpenVINO columns: over
    ov_custom's, and ort_custom's time over ov_custom's), then the end-to-end
    models' table and profiles when the report has them."""
    copy = report["copy_gbps"]
    cases: dict[tuple, dict[str, dict]] = {}
    for r in report["results"]:
        if not is_end_to_end(r):
            cases.setdefault(_key(r), {})[r["impl"]] = r
    lines = []
    if cases:
        lines += [
            "| op | shape | dtype | threads | pass | opbridge_torch us (% copy) | torch_composite "
            "| torch_builtin | torch_compile | opbridge_torch_out | ort_custom us (% copy) "
            "| ort_standard | ort_standard_nofusion | ort_contrib | ort_fused | ort_contrib ops "
            "| ort_fused ops | ov_custom us | ov_standard | ov_fused | ort_custom / ov_custom |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]

    def base_cell(entry):
        if entry is None:
            return "-"
        return f"{entry['median_us']:.1f} ({100 * entry['gbps'] / copy:.0f}%)"

    def us_cell(entry):
        return "-" if entry is None else f"{entry['median_us']:.1f}"

    def ratio(entry, base):
        if entry is None or base is None:
            return "-"
        return f"{entry['median_us'] / base['median_us']:.2f}x"

    def standard_base(custom, standard):
        """An operator without a custom route (one opbridge did not build):
        its standard route is the runtime's base, marked so in its cell."""
        if custom is not None or standard is None:
            return custom, None
        return standard, "standard: "

    for key, impls in cases.items():
        op, shape, dtype, threads, pass_ = key
        ob = impls.get("opbridge_torch")
        oc, oc_mark = standard_base(impls.get("ort_custom"), impls.get("ort_standard"))
        ov, ov_mark = standard_base(impls.get("ov_custom"), impls.get("ov_standard"))
        ort_base = oc_mark + base_cell(oc) if oc_mark else base_cell(oc)
        ov_base = ov_mark + us_cell(ov) if ov_mark else us_cell(ov)
        lines.append(
            f"| {op} | {'x'.join(map(str, shape))} | {dtype} | {threads} | {pass_} | "
            f"{base_cell(ob)} | {ratio(impls.get('torch_composite'), ob)} | "
            f"{ratio(impls.get('torch_builtin'), ob)} | {ratio(impls.get('torch_compile'), ob)} | "
            f"{ratio(impls.get('opbridge_torch_out'), ob)} | "
            f"{ort_base} | {ratio(impls.get('ort_standard'), oc)} | "
            f"{ratio(impls.get('ort_standard_nofusion'), oc)} | "
            f"{ratio(impls.get('ort_contrib'), oc)} | {ratio(impls.get('ort_fused'), oc)} | "
            f"{fused_cell(impls.get('ort_contrib'))} | {fused_cell(impls.get('ort_fused'))} | "
            f"{ov_base} | {ratio(impls.get('ov_standard'), ov)} | "
            f"{ratio(impls.get('ov_fused'), ov)} | {ratio(oc, ov)} |"
        )
    models = models_markdown(report)
    if models:
        lines += ([""] if lines else []) + models
    return "\n".join(lines)


def models_markdown(report: dict) -> list[str]:
    """The end-to-end models' table: median and p99 per implementation, its
    ratio to opbridge_torch and to ort_custom (above 1: slower), the largest
    output difference from opbridge_torch (hf_llama: from transformers' model
    in torch), ONNX Runtime's own operators in the model; then each profile's
    shares."""
    cases: dict[tuple, dict[str, dict]] = {}
    for r in report["results"]:
        if is_end_to_end(r):
            cases.setdefault(_key(r), {})[r["impl"]] = r
    if not cases:
        return []
    lines = [
        "| model | input | threads | impl | median ms | p99 ms | x opbridge_torch "
        "| x ort_custom | max abs diff | ONNX Runtime ops in the model |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (op, shape, dtype, threads, _), impls in cases.items():
        ob, oc = impls.get("opbridge_torch"), impls.get("ort_custom")
        for impl in IMPLS:
            r = impls.get(impl)
            if r is None:
                continue
            vs_ob = f"{r['median_us'] / ob['median_us']:.2f}x" if ob else "-"
            vs_oc = (
                f"{r['median_us'] / oc['median_us']:.2f}x" if oc and impl.startswith("ort") else "-"
            )
            diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else "-"
            lines.append(
                f"| {op} | {'x'.join(map(str, shape))} {dtype} | {threads} | {impl} | "
                f"{r['median_us'] / 1e3:.2f} | {r['p99_us'] / 1e3:.2f} | {vs_ob} | {vs_oc} | "
                f"{diff} | {fused_cell(r)} |"
            )
    descriptions = report.get("models", {})
    if descriptions:
        lines += [""] + [f"- {name}: {what}" for name, what in descriptions.items()]
    choices = report.get("compile_choices", {})
    if choices:
        lines += ["", 'opbridge_compile_auto\'s choice (opbridge.compile, ops="auto"):', ""]
        for name, choice in choices.items():
            plan = choice["plan"]
            decomposed = [op for op, c in plan.items() if c == "decompose"]
            kernels = [op for op, c in plan.items() if c == "kernel"]
            lines.append(
                f"- {name}: decomposed {', '.join(decomposed) or 'none'}; kernels "
                f"{', '.join(kernels) or 'none'}"
            )
    if report.get("profiles"):
        lines += [
            "",
            "Share of profiled operator time (opbridge_torch: torch.profiler, top-level "
            "operators; ort_custom: ONNX Runtime's profiler, node kernel times; matrix products "
            "include convolutions):",
            "",
        ]
        for p in report["profiles"]:
            top = ", ".join(f"{name} {pct:.0f}%" for name, pct in p["top"][:4])
            lines.append(
                f"- {p['op']} {p['impl']} {p['threads']}t: opbridge ops {p['opbridge_pct']:.1f}%, "
                f"matrix products {p['matmul_pct']:.1f}%, other {p['other_pct']:.1f}% "
                f"(largest: {top})"
            )
    return lines


def plot(report: dict, path: Path) -> None:
    """Operators: share of the copy bandwidth per implementation; end-to-end
    models (a second panel): median time over opbridge_torch's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    ops: dict[tuple, dict[str, float]] = {}
    e2e: dict[tuple, dict[str, float]] = {}
    for r in report["results"]:
        if is_end_to_end(r):
            e2e.setdefault(_key(r), {})[r["impl"]] = r["median_us"]
        else:
            ops.setdefault(_key(r), {})[r["impl"]] = r["gbps"] / report["copy_gbps"]
    if ops:
        panels.append((ops, "fraction of copy bandwidth"))
    if e2e:
        relative = {
            k: {i: t / c["opbridge_torch"] for i, t in c.items()}
            for k, c in e2e.items()
            if "opbridge_torch" in c
        }
        panels.append((relative, "median time / opbridge_torch's"))
    if not panels:
        return
    width_cases = max(len(cases) for cases, _ in panels)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(max(8, 0.9 * width_cases), 5 * len(panels)), squeeze=False
    )
    for ax, (cases, ylabel) in zip(axes[:, 0], panels, strict=True):
        impls = [i for i in IMPLS if any(i in c for c in cases.values())]
        width = 0.8 / max(1, len(impls))
        for k, impl in enumerate(impls):
            values = [c.get(impl, 0.0) for c in cases.values()]
            ax.bar([i + k * width for i in range(len(cases))], values, width, label=impl)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
        ax.set_xticklabels(
            [f"{k[0]}\n{'x'.join(map(str, k[1]))}\n{k[2]} {k[3]}t {k[4]}" for k in cases],
            fontsize=7,
        )
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    axes[0, 0].set_title(f"opbridge bench (copy {report['copy_gbps']:.1f} GB/s)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
