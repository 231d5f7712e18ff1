"""The speed targets, checked against one `opbridge bench --json` run.

Targets (float32, DRAM-sized shapes, at --threads, all ratios from the run):
  - every operator, forward: opbridge_torch and ort_custom each >= 1.0x
    torch_compile and >= 1.0x the better of ort_standard and ort_contrib, and
    >= 75% of the run's copy bandwidth;
  - every operator with a backward, forward+backward: opbridge_torch >= 1.0x
    torch_compile and >= 1.5x torch_builtin where there is one;
  - end-to-end models: opbridge_torch >= 1.0x every other PyTorch
    implementation, ort_custom >= 1.0x every other ONNX Runtime one.
A ratio is the alternative's median time over opbridge's (above 1: opbridge
is faster).

    .venv/bin/python benchmarks/targets.py benchmarks/results/latest.json [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys

TORCH_MODEL_ALTERNATIVES = ("torch_composite", "torch_compile")
ORT_MODEL_ALTERNATIVES = ("ort_standard", "ort_standard_nofusion", "ort_contrib", "ort_fused")
MODELS = ("llama_prefill", "llama_decode", "vision")


def _cases(report: dict, threads: int) -> dict[tuple, dict[str, dict]]:
    cases: dict[tuple, dict[str, dict]] = {}
    for r in report["results"]:
        # the operators in float32; the models in their own input type
        if r["threads"] == threads and (r["dtype"] == "float32" or r["op"] in MODELS):
            key = (r["op"], tuple(r["shape"]), r["pass"])
            cases.setdefault(key, {})[r["impl"]] = r
    return cases


def _dram_shape(cases: dict, op: str) -> tuple | None:
    """The largest shape the run timed for op (the DRAM-sized one)."""
    shapes = [shape for (o, shape, _), _ in cases.items() if o == op]
    return max(shapes, key=lambda s: _numel(s)) if shapes else None


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def rows(report: dict, threads: int) -> list[tuple[str, str, str, bool]]:
    """(target, goal, measured, met) for every target the run has data for."""
    copy = report["copy_gbps"]
    cases = _cases(report, threads)
    ops = sorted({op for (op, _, _) in cases if op not in MODELS and op != "demo_model"})
    out = []

    def speedup(target, impls, base, alternatives, goal=1.0):
        """base against the fastest of alternatives that ran, if any did."""
        ratios = [
            (impls[name]["median_us"] / impls[base]["median_us"], name)
            for name in alternatives
            if name in impls and base in impls
        ]
        if ratios:
            r, name = min(ratios)
            named = f" ({name})" if len(alternatives) > 1 else ""
            out.append((f"{target}{named}", f">= {goal:.1f}x", f"{r:.2f}x", r >= goal))

    for op in ops:
        shape = _dram_shape(cases, op)
        size = "x".join(map(str, shape))
        fwd = cases.get((op, shape, "fwd"), {})
        for base in ("opbridge_torch", "ort_custom"):
            if base not in fwd:
                continue
            speedup(f"{op} {size} fwd: {base} vs torch_compile", fwd, base, ["torch_compile"])
            speedup(
                f"{op} {size} fwd: {base} vs the better ORT anchor",
                fwd,
                base,
                ["ort_standard", "ort_contrib"],
            )
            share = fwd[base]["gbps"] / copy
            target = f"{op} {size} fwd: {base} share of copy bandwidth"
            out.append((target, ">= 75%", f"{100 * share:.0f}%", share >= 0.75))
        both = cases.get((op, shape, "fwd+bwd"), {})
        target = f"{op} {size} fwd+bwd: opbridge_torch vs"
        speedup(f"{target} torch_compile", both, "opbridge_torch", ["torch_compile"])
        speedup(f"{target} torch_builtin", both, "opbridge_torch", ["torch_builtin"], goal=1.5)

    for model in MODELS:
        for (op, _shape, _), impls in cases.items():
            if op == model:
                for base, alternatives in (
                    ("opbridge_torch", TORCH_MODEL_ALTERNATIVES),
                    ("ort_custom", ORT_MODEL_ALTERNATIVES),
                ):
                    speedup(f"{model}: {base} vs the fastest other", impls, base, alternatives)
    return out


def markdown(report: dict, threads: int) -> str:
    lines = ["| target | goal | measured | |", "|---|---|---|---|"]
    for target, goal, measured, met in rows(report, threads):
        lines.append(f"| {target} | {goal} | {measured} | {'met' if met else '**missed**'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", help="an `opbridge bench --json` file")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    with open(args.report) as f:
        report = json.load(f)
    table = rows(report, args.threads)
    if not table:
        print(f"no float32 results at {args.threads} threads in {args.report}", file=sys.stderr)
        return 1
    print(markdown(report, args.threads))
    met = sum(1 for *_, ok in table if ok)
    print(f"\n{met} of {len(table)} targets met.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
