"""``opbridge bench``: the operators, the demo model and end-to-end models
against PyTorch and the runtimes' alternatives (:mod:`opbridge.bench`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import opbridge
from opbridge._library import set_simd_target
from opbridge.bench import models as bench_models
from opbridge.bench.cases import DTYPES, IMPLS, OpCase
from opbridge.bench.machine import machine_description, tune_allocator
from opbridge.bench.report import markdown_table, plot
from opbridge.bench.runner import Settings, op_sizes, run_benchmark
from opbridge.cli.common import (
    FactoryError,
    add_import_argument,
    add_threads_argument,
    import_modules,
)

HELP = (
    "benchmark the operators, the demo model and end-to-end models against PyTorch and ONNX "
    "Runtime alternatives"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes and few iterations (proves it runs)"
    )
    add_import_argument(parser)
    parser.add_argument(
        "--ops",
        nargs="+",
        default=None,
        metavar="OP",
        help="operators: built-in names (" + ", ".join(opbridge.specs()) + ") or qualified "
        "names of registered cards (myops::my_op); only these run (no demo model, and the "
        "end-to-end models only when --models names them too); default: every card",
    )
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=list(DTYPES))
    parser.add_argument(
        "--sizes", nargs="+", default=None, help="size names to run (small, cache, dram)"
    )
    add_threads_argument(parser, "default: 1 and all", several=True)
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=list(IMPLS))
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per measurement")
    parser.add_argument("--iters", type=int, default=20, help="minimum timed calls")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls")
    parser.add_argument("--no-backward", action="store_true", help="forward only")
    parser.add_argument(
        "--no-model",
        action="store_true",
        help="skip the demo model (and the end-to-end models unless --models names them); "
        "--ops implies it",
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=None,
        choices=list(bench_models.MODEL_NAMES),
        metavar="MODEL",
        help="end-to-end models: " + ", ".join(bench_models.MODEL_NAMES) + " (when none are "
        "named: " + ", ".join(bench_models.DEFAULT_MODELS) + "); without --ops, only these run, "
        "with --ops, these and those ops. A full run includes "
        + ", ".join(bench_models.DEFAULT_MODELS)
        + "; --ops or --quick includes them only when asked (--quick at toy sizes). hf_llama "
        "(a transformers Llama with grouped-query attention, exported by transformers' own "
        "exporter: ort_hf_fusions, its export with ort_fusions='cpu', beside opbridge's routes "
        "on the opbridge.patch-ed copy) runs only when named, and needs transformers with "
        "transformers.exporters",
    )
    parser.add_argument(
        "--simd-target",
        default="",
        help="force a SIMD target (one of opbridge._library.simd_targets())",
    )
    parser.add_argument(
        "--default-allocator",
        action="store_true",
        help="leave glibc malloc untuned (large tensors page-faulted in on every call)",
    )
    parser.add_argument("--json", type=Path, help="write results as JSON")
    parser.add_argument("--plot", type=Path, help="write a PNG chart")
    parser.add_argument("--markdown", type=Path, help="write the ratio table as markdown")


def resolve_ops(names: list[str] | None) -> list[str]:
    """The benchmark's names of the ops asked for (bare for built-ins,
    qualified otherwise); every card when none are named."""
    if names is None:
        return [c.display_name for c in opbridge.ops.cards().values()]
    return [OpCase(name).name for name in names]


def end_to_end_models(args: argparse.Namespace) -> list[str]:
    """The end-to-end models to run: those named by ``--models``
    (``DEFAULT_MODELS`` when it names none: hf_llama runs only when named);
    without ``--models``, ``DEFAULT_MODELS`` in a full run and none with
    ``--ops``, ``--quick`` or ``--no-model``."""
    if args.models is not None:
        return list(dict.fromkeys(args.models or bench_models.DEFAULT_MODELS))
    if args.ops is not None or args.quick or args.no_model:
        return []
    return list(bench_models.DEFAULT_MODELS)


def runs_demo_model(args: argparse.Namespace) -> bool:
    """Whether the demo model runs: in a run of every op (no ``--ops``,
    ``--models`` or ``--no-model``)."""
    return args.ops is None and args.models is None and not args.no_model


def markdown_header(report: dict, settings: Settings) -> str:
    """What the run was on: machine, allocator, threads, load averages."""
    start, end = report["load_average"]["start"], report["load_average"]["end"]

    def loads(values):
        return ", ".join(f"{v:.2f}" for v in values)

    return (
        f"Machine: {report['machine']}; allocator: {report.get('allocator', '-')}; "
        f"threads {', '.join(map(str, settings.thread_counts))}; copy bandwidth "
        f"{report['copy_gbps']:.1f} GB/s.\n"
        f"Load average (1, 5, 15 min): {loads(start)} at the start, {loads(end)} at the end "
        f"(the machine has {os.cpu_count()} logical CPUs; other work on it slows every "
        "implementation)."
    )


def run(args: argparse.Namespace) -> int:
    try:
        import_modules(args.imports)
        ops = [] if args.models is not None and args.ops is None else resolve_ops(args.ops)
        models = end_to_end_models(args)
        bench_models.check_models(models)
    except FactoryError as error:
        print(f"opbridge bench: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    set_simd_target(args.simd_target)
    all_threads = os.cpu_count() or 1
    sizes = op_sizes(args.quick)
    if args.sizes:
        sizes = {k: v for k, v in sizes.items() if k in args.sizes}
    model_sizes = {"small": [1, 16, 256], "cache": [4, 64, 256]}
    if args.quick:
        model_sizes = {"small": [1, 4, 256]}
    settings = Settings(
        thread_counts=args.threads or sorted({1, all_threads}),
        dtypes=args.dtypes,
        ops=ops,
        sizes=sizes,
        model_sizes=model_sizes if runs_demo_model(args) else {},
        warmup=3 if args.quick and args.warmup == 50 else args.warmup,
        iters=3 if args.quick and args.iters == 20 else args.iters,
        budget_s=0.0 if args.quick else args.budget,
        backward=not args.no_backward,
        impls=args.impls,
        models=models,
        quick_models=args.quick,
    )
    allocator = "default" if args.default_allocator else tune_allocator()
    print(f"machine: {machine_description()}; allocator: {allocator}", flush=True)
    report = run_benchmark(settings, log=lambda line: print(line, flush=True))
    report["allocator"] = allocator
    table = markdown_table(report)
    print()
    print(f"copy bandwidth: {report['copy_gbps']:.1f} GB/s")
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    if args.markdown:
        args.markdown.write_text(markdown_header(report, settings) + "\n\n" + table + "\n")
    if args.plot:
        plot(report, args.plot)
    return 0
