"""torch.compile of the end-to-end LLaMA-style models with opbridge's
operators, side by side and interleaved:

- ``torch_compile``: inductor on the composite twin (every opbridge module
  computed by its card's composite: the model without opbridge);
- ``opbridge_compile``: ``opbridge.compile(model, ops="kernel")``, plain
  torch.compile of the model with opbridge's operators as kernels;
- ``opbridge_compile_auto``: ``opbridge.compile(model, inputs, ops="auto")``,
  the per-operator choice measured on the model first (its table is printed
  and written).

Each round runs every variant in turn (``--warmup`` untimed calls, then
``--calls`` timed ones), so that other load on the machine falls on all of
them alike; the ratio is torch_compile's median time over the variant's
(above 1.00x: faster than torch.compile of the model without opbridge), with
the range of the per-round ratios.

    .venv/bin/python benchmarks/compile_models.py [--threads 1 2] [--rounds 8]
        [--markdown benchmarks/results/compile_models.md] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

import opbridge
from opbridge import compiling
from opbridge.bench import models as bench_models
from opbridge.bench.machine import machine_description

VARIANTS = ("torch_compile", "opbridge_compile", "opbridge_compile_auto")


def measure(name: str, threads: int, rounds: int, warmup: int, calls: int, log) -> dict:
    torch.set_num_threads(threads)
    (case,) = bench_models.build_cases([name])
    model, inputs = case.model, case.inputs
    start = time.perf_counter()
    auto = opbridge.compile(
        model,
        inputs,
        ops="auto",
        timer=compiling.interleaved_timer(rounds=3, warmup=warmup, calls=calls),
    )
    choice = auto.opbridge_compile_choice
    log(f"{name} {threads}t: choice measured in {time.perf_counter() - start:.0f} s")
    log(choice.table())
    fns = {
        "torch_compile": torch.compile(bench_models.composite_twin(model), dynamic=False),
        "opbridge_compile": opbridge.compile(model, ops="kernel"),
        "opbridge_compile_auto": auto,
    }
    times: dict[str, list[list[float]]] = {k: [] for k in fns}
    with torch.no_grad():
        expected = model(*inputs)
        diffs = {k: float((f(*inputs) - expected).abs().max()) for k, f in fns.items()}
        for _ in range(rounds):
            for variant, fn in fns.items():
                for _ in range(warmup):
                    fn(*inputs)
                timed = []
                for _ in range(calls):
                    t = time.perf_counter()
                    fn(*inputs)
                    timed.append(time.perf_counter() - t)
                times[variant].append(timed)
    base = statistics.median(t for r in times["torch_compile"] for t in r)
    base_rounds = [statistics.median(r) for r in times["torch_compile"]]
    rows = {}
    for variant, per_round in times.items():
        median = statistics.median(t for r in per_round for t in r)
        ratios = [b / statistics.median(r) for b, r in zip(base_rounds, per_round, strict=True)]
        rows[variant] = dict(
            median_ms=1e3 * median,
            ratio=base / median,
            round_ratio_min=min(ratios),
            round_ratio_max=max(ratios),
            max_abs_diff=diffs[variant],
        )
        log(
            f"{name} {threads}t {variant}: {1e3 * median:.1f} ms, {base / median:.3f}x "
            f"torch_compile (rounds {min(ratios):.2f}-{max(ratios):.2f}), "
            f"max abs diff {diffs[variant]:.1e}"
        )
    return dict(
        model=name,
        threads=threads,
        rows=rows,
        plan=choice.plan,
        choice=choice.table(),
        load_average=list(os.getloadavg()),
    )


def markdown(runs: list[dict], args) -> str:
    lines = [
        "# torch.compile of the LLaMA-style stack with opbridge's operators",
        "",
        f"`.venv/bin/python benchmarks/compile_models.py --threads "
        f"{' '.join(map(str, args.threads))} --rounds {args.rounds}`; machine: "
        f"{machine_description()}. Interleaved rounds of "
        f"{args.warmup} untimed and {args.calls} timed calls of each variant; ratio: "
        "torch_compile's median over the variant's (above 1.00x: faster than torch.compile "
        "of the model without opbridge), with the range of the per-round ratios. The load "
        "average (1 minute) when each model's timing ended says how much else ran: the "
        f"machine has {os.cpu_count()} logical CPUs.",
        "",
        "| model | threads | variant | median ms | x torch_compile | per-round range "
        "| max abs diff | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for variant, row in run["rows"].items():
            lines.append(
                f"| {run['model']} | {run['threads']} | {variant} | {row['median_ms']:.1f} | "
                f"{row['ratio']:.3f}x | {row['round_ratio_min']:.2f}-{row['round_ratio_max']:.2f}"
                f" | {row['max_abs_diff']:.1e} | {run['load_average'][0]:.1f} |"
            )
    lines += ["", "## The choices of opbridge_compile_auto", ""]
    for run in runs:
        lines += [
            f"{run['model']}, {run['threads']} thread(s):",
            "",
            "```",
            run["choice"],
            "```",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["llama_decode", "llama_prefill"])
    parser.add_argument("--threads", nargs="+", type=int, default=[os.cpu_count() or 1])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = []
    for threads in args.threads:
        for name in args.models:
            runs.append(measure(name, threads, args.rounds, args.warmup, args.calls, print))
            if args.json:
                args.json.write_text(json.dumps(runs, indent=1))
    if args.markdown:
        args.markdown.write_text(markdown(runs, args))


if __name__ == "__main__":
    main()
