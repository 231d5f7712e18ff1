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

    def ratio(impls, alternative, base):
        a, b = impls.get(alternative), impls.get(base)
        return None if a is None or b is None else a["median_us"] / b["median_us"]

    for op in ops:
        shape = _dram_shape(cases, op)
        size = "x".join(map(str, shape))
        fwd = cases.get((op, shape, "fwd"), {})
        for base in ("opbridge_torch", "ort_custom"):
            if base not in fwd:
                continue
            r = ratio(fwd, "torch_compile", base)
            if r is not None:
                out.append(
                    (f"{op} {size} fwd: {base} vs torch_compile", ">= 1.0x", f"{r:.2f}x", r >= 1.0)
                )
            anchors = [(name, ratio(fwd, name, base)) for name in ("ort_standard", "ort_contrib")]
            anchors = [(name, r) for name, r in anchors if r is not None]
            if anchors:
                name, r = min(anchors, key=lambda a: a[1])
                out.append(
                    (
                        f"{op} {size} fwd: {base} vs the better ORT anchor ({name})",
                        ">= 1.0x",
                        f"{r:.2f}x",
                        r >= 1.0,
                    )
                )
            share = fwd[base]["gbps"] / copy
            out.append(
                (
                    f"{op} {size} fwd: {base} share of copy bandwidth",
                    ">= 75%",
                    f"{100 * share:.0f}%",
                    share >= 0.75,
                )
            )
        both = cases.get((op, shape, "fwd+bwd"), {})
        if "opbridge_torch" in both:
            r = ratio(both, "torch_compile", "opbridge_torch")
            if r is not None:
                out.append(
                    (
                        f"{op} {size} fwd+bwd: opbridge_torch vs torch_compile",
                        ">= 1.0x",
                        f"{r:.2f}x",
                        r >= 1.0,
                    )
                )
            r = ratio(both, "torch_builtin", "opbridge_torch")
            if r is not None:
                out.append(
                    (
                        f"{op} {size} fwd+bwd: opbridge_torch vs torch_builtin",
                        ">= 1.5x",
                        f"{r:.2f}x",
                        r >= 1.5,
                    )
                )

    for model in MODELS:
        for (op, _shape, _), impls in cases.items():
            if op != model:
                continue
            for base, alternatives in (
                ("opbridge_torch", TORCH_MODEL_ALTERNATIVES),
                ("ort_custom", ORT_MODEL_ALTERNATIVES),
            ):
                measured = [(name, ratio(impls, name, base)) for name in alternatives]
                measured = [(name, r) for name, r in measured if r is not None]
                if base in impls and measured:
                    name, r = min(measured, key=lambda a: a[1])
                    out.append(
                        (
                            f"{model}: {base} vs the fastest other ({name})",
                            ">= 1.0x",
                            f"{r:.2f}x",
                            r >= 1.0,
                        )
                    )
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
