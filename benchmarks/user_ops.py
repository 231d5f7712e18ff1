"""A user's operator against what a user would pick instead, side by side in one run.

The operators come from user projects built on the SDK, not from opbridge:

- ``soft_cap``: the operator ``opbridge new-op`` writes (``y = cap *
  tanh(x / cap)``, with a backward), scaffolded afresh into ``--build-dir``;
- ``swiglu_clamp``, ``fused_norm``, ``softmax_lse`` (two outputs, a
  backward through both), ``gated_rope`` (x [1, rows, 32, 128], int64
  positions, a gate per head) and ``pairwise_dot`` (rows * 4 batch rows of
  32 features of 32 values, all their pairs' dot products): the operators
  of the user-library example ``examples/fused_norm``.

Each project's library is built by the SDK's JIT build
(:func:`opbridge.sdk.build.load`, cached by content: a rerun with unchanged
sources does not compile) and its Python package imported from the project
(loading the library and registering the operators' cards), without
installing anything. Any other name in ``--ops`` is an operator whose card is
already registered (opbridge's own: ``scaled_clamp``), timed the same way.

Implementations, on the same inputs (the card's ``bench_inputs``):

- ``torch_composite``: the card's composite (its reference where it has none)
  in eager PyTorch; ``torch_compile``: the same under inductor, compiled
  afresh for every size and thread count (in the first warm-up);
- ``opbridge_torch``: the user's operator, eager (the card's call);
- ``ort_standard`` / ``ort_custom``: the operator in a one-op module exported
  by the standard / custom route (``opbridge.bench.export_onnx``) and run in
  ONNX Runtime with the user's library (all graph optimizations);
- ``copy``: ``Tensor.copy_`` between float32 buffers allocated once, half the
  pass's bytes each, so the copy reads and writes as many bytes as the pass
  must move at least (fwd: every input read once, every output written once;
  fwd+bwd adds each output's gradient read, and each input that takes a
  gradient read again and its gradient written). "% copy" is a result's
  share of that copy's bandwidth: the copy's time over the result's.

Sizes ``cache`` (64x4096) and ``dram`` (``--dram-rows`` x 4096, 8192 by
default: 128 MiB per float32 tensor); 1 and 2 threads (``torch.set_num_threads``,
ONNX Runtime's ``intra_op_num_threads``); ``fwd`` for every implementation,
``fwd+bwd`` for the PyTorch ones of an operator with a backward. Every
output is first compared with the operator's (``max_abs_diff``).

Timing (``opbridge.bench.time_calls``): ``--rounds`` rounds, each running
every implementation in turn (the order rotated from round to round) for a
block of calls after a short warm-up; the median and p99 are over the calls
of all rounds. On a machine others are using, load changes during the run
then falls on every implementation alike rather than on whichever ran at
the time; the report gives the load averages at the start and the end.

Ratios are the alternative's median time over the operator's (above 1: the
user's operator is faster). The issue's targets, judged at the ``dram`` size
in float32 per thread count: forward >= 1.0x ``torch_compile`` and >= 75% of
the copy bandwidth; forward+backward >= 1.0x ``torch_compile``; for
softmax_lse, forward and forward+backward >= 1.3x ``torch_compile``; for
gated_rope, also in bfloat16: forward >= 1.0x ``torch_compile`` and >= 50%
of the copy bandwidth, forward+backward >= 1.0x ``torch_compile``; for
pairwise_dot (compute-bound), forward and forward+backward >= 1.0x
``torch_compile``.
``--simd-target`` runs the user libraries' kernels on one SIMD target (one
of their ``simd_targets()``) instead of the CPU's best.

    .venv/bin/python benchmarks/user_ops.py
        [--ops soft_cap swiglu_clamp fused_norm softmax_lse gated_rope pairwise_dot]
        [--threads 1 2] [--dtypes float32 bfloat16] [--rounds 4] [--simd-target SSE4] [--quick]

writes ``benchmarks/results/user_ops.json`` and ``.md`` (``--json``,
``--markdown``; ``--quick`` writes only those asked for).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import opbridge
from opbridge import _C
from opbridge._library import library_for_namespace
from opbridge.bench import (
    DTYPES,
    OpCase,
    Result,
    export_onnx,
    impl_runner,
    impl_session,
    last_level_cache_bytes,
    machine_description,
    tensors_of,
    time_calls,
    tune_allocator,
)
from opbridge.bench.cases import export_key, fresh_compile
from opbridge.bench.runner import fwd_bwd, max_abs_diff, native_stdout_silenced, result_of
from opbridge.ops import UnknownOperatorError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fused_norm"
RESULTS = ROOT / "benchmarks" / "results"

# The user operators by short name: (project, qualified operator name).
USER_OPS = {
    "soft_cap": ("scaffold", "soft_cap_ops::soft_cap"),
    "swiglu_clamp": ("fused_norm", "myops::swiglu_clamp"),
    "fused_norm": ("fused_norm", "myops::fused_norm"),
    "softmax_lse": ("fused_norm", "myops::softmax_lse"),
    "gated_rope": ("fused_norm", "myops::gated_rope"),
    "pairwise_dot": ("fused_norm", "myops::pairwise_dot"),
}
DEFAULT_OPS = tuple(USER_OPS)
TORCH_IMPLS = ("torch_composite", "torch_compile", "opbridge_torch")
ORT_IMPLS = ("ort_standard", "ort_custom")
IMPLS = (*TORCH_IMPLS, *ORT_IMPLS, "copy")
# Calls before each later round's block (the first round warms up fully,
# for at most about WARMUP_S seconds).
REWARM = 3
WARMUP_S = 1.0
# The targets at the dram size: (pass, what the op is measured
# against, goal, dtype). "copy": the op's share of the copy bandwidth.
TARGETS = (
    ("fwd", "torch_compile", 1.0, "float32"),
    ("fwd", "copy", 0.75, "float32"),
    ("fwd+bwd", "torch_compile", 1.0, "float32"),
)
# An operator's own targets, in place of TARGETS: softmax_lse takes an exp
# per element (compute-bound, no share of the copy asked); gated_rope's
# angles are transcendental, and it is judged in bfloat16 too; pairwise_dot
# does 16 multiply-adds per value it reads (F = D = 32: compute-bound).
OP_TARGETS = {
    "pairwise_dot": (
        ("fwd", "torch_compile", 1.0, "float32"),
        ("fwd+bwd", "torch_compile", 1.0, "float32"),
    ),
    "softmax_lse": (
        ("fwd", "torch_compile", 1.3, "float32"),
        ("fwd+bwd", "torch_compile", 1.3, "float32"),
    ),
    "gated_rope": (
        *TARGETS,
        ("fwd", "torch_compile", 1.0, "bfloat16"),
        ("fwd", "copy", 0.5, "bfloat16"),
        ("fwd+bwd", "torch_compile", 1.0, "bfloat16"),
    ),
}


@dataclass
class Plan:
    sizes: dict[str, list[int]]
    dtypes: list[str]
    threads: list[int]
    impls: list[str]
    warmup: int
    iters: int
    budget_s: float
    rounds: int
    backward: bool = True


def plan_for(args: argparse.Namespace) -> Plan:
    if args.quick:
        sizes = {"cache": [8, 256], "dram": [64, 256]}
    else:
        sizes = {"cache": [64, 4096], "dram": [args.dram_rows, 4096]}
    if args.sizes:
        sizes = {name: shape for name, shape in sizes.items() if name in args.sizes}
    return Plan(
        sizes=sizes,
        dtypes=args.dtypes,
        threads=args.threads,
        impls=args.impls,
        warmup=2 if args.quick else args.warmup,
        iters=2 if args.quick else args.iters,
        budget_s=0.0 if args.quick else args.budget,
        rounds=2 if args.quick else args.rounds,
        backward=not args.no_backward,
    )


# ---------------------------------------------------------------- user projects

_ADD_LIBRARY = re.compile(r"opbridge_add_operator_library\(\s*(\w+)(.*?)\)", re.S)
_LIBRARY_FIELDS = ("TORCH_NAMESPACE", "ONNX_DOMAIN", "DOMAIN_VERSION", "INSTALL_DESTINATION")


def project_library(project: Path) -> tuple[str, dict[str, str]]:
    """The library name and the fields of the project's
    ``opbridge_add_operator_library(...)`` call (its CMakeLists.txt)."""
    found = _ADD_LIBRARY.search((project / "CMakeLists.txt").read_text())
    if found is None:
        raise RuntimeError(f"{project}/CMakeLists.txt has no opbridge_add_operator_library call")
    words = found.group(2).split()
    fields = {
        word: words[i + 1].strip('"')
        for i, word in enumerate(words[:-1])
        if word in _LIBRARY_FIELDS
    }
    return found.group(1), fields


def load_project(project: Path, build_dir: Path, log) -> None:
    """Builds the project's library by the JIT build (its ``csrc/*/*.cpp``,
    as its CMakeLists.txt globs them) and imports its Python package from
    ``python/``, which loads the library and registers its cards."""
    name, fields = project_library(project)
    package = fields.get("INSTALL_DESTINATION", name)
    if package in sys.modules:
        return
    start = time.perf_counter()
    library = opbridge.sdk.build.load(
        name,
        sorted((project / "csrc").glob("*/*.cpp")),
        torch_namespace=fields.get("TORCH_NAMESPACE", name),
        onnx_domain=fields.get("ONNX_DOMAIN", name),
        domain_version=int(fields.get("DOMAIN_VERSION", 1)),
        include_dirs=[project / "csrc"],
        build_directory=build_dir / "jit",
    )
    # The package imports its extension module as a submodule: it is the one just built.
    sys.modules.setdefault(f"{package}.{library.module.__name__}", library.module)
    sys.path.insert(0, str(project / "python"))
    importlib.import_module(package)
    ops = ", ".join(sorted(library.specs()))
    log(
        f"{project.name}: library {name} (torch.ops.{library.torch_namespace}, ONNX domain "
        f"{library.onnx_domain}; operators {ops}) built and loaded in "
        f"{time.perf_counter() - start:.0f} s"
    )


def scaffold_project(build_dir: Path) -> Path:
    """``opbridge new-op`` (operator soft_cap), written anew into
    ``build_dir/soft_cap_project``: the same path and content on every run,
    so the JIT build's cache holds."""
    from opbridge.__main__ import main as opbridge_main

    project = build_dir / "soft_cap_project"
    shutil.rmtree(project, ignore_errors=True)
    with contextlib.redirect_stdout(io.StringIO()):
        code = opbridge_main(["new-op", str(project), "--name", "soft_cap"])
    if code != 0:
        raise RuntimeError(f"opbridge new-op {project} --name soft_cap failed (exit {code})")
    return project


# Why a project did not build or load, by name (tried once per run).
_PROJECT_ERRORS: dict[str, str] = {}


class OpNotFound(LookupError):
    """An operator asked for that neither its project nor a card has."""


def resolve_op(name: str, build_dir: Path, log) -> str:
    """The qualified name of the operator to time, its project built and
    loaded first; OpNotFound when there is no such operator (or its project
    does not build)."""
    project, qualified = USER_OPS.get(name, (None, name))
    path = {"scaffold": None, "fused_norm": EXAMPLE}.get(project)
    if project is not None and project not in _PROJECT_ERRORS:
        try:
            load_project(path or scaffold_project(build_dir), build_dir, log)
        except (RuntimeError, ImportError, OSError) as error:
            lines = str(error).strip().splitlines() or [""]
            errors = [line.strip() for line in lines if "error" in line.lower()]
            _PROJECT_ERRORS[project] = (
                f"{type(error).__name__}: {lines[0][:300]} ... {(errors or lines)[0][:300]}"
            )
    if project in _PROJECT_ERRORS:
        raise OpNotFound(
            f"{name}: not timed: its project ({project}) did not build or load "
            f"({_PROJECT_ERRORS[project]})"
        )
    try:
        opbridge.ops.card(qualified)
    except UnknownOperatorError as error:
        namespace, _, bare = qualified.partition("::")
        library = library_for_namespace(namespace) if project else None
        if library is None:
            raise OpNotFound(f"{name}: op not found ({error})") from None
        where = path.relative_to(ROOT) if path else f"the {project} project"
        ops = ", ".join(sorted(library.specs()))
        has = "has no card registered for it" if bare in library.specs() else "is not one of them"
        raise OpNotFound(
            f"{name}: op not found: {where}'s library {library.name} has the operators {ops}; "
            f"{qualified} {has}"
        ) from None
    return qualified


# ---------------------------------------------------------------- measuring


def copy_call(nbytes: int) -> Callable[[], object]:
    """A copy reading and writing ``nbytes`` in all: two float32 buffers
    of half of it each, allocated once."""
    src = torch.ones(max(1, nbytes // 8), dtype=torch.float32)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def time_rounds(
    fns: dict[str, Callable[[], object]], plan: Plan, log, label: str, call_s: dict[str, float]
) -> dict[str, list[float]]:
    """``plan.rounds`` rounds; in each, every implementation in turn (the
    order rotated by one per round) runs a block of calls: its warm-up
    (``plan.warmup`` calls in the first round, fewer for a slow call:
    about WARMUP_S by ``call_s``, the seconds of one call; REWARM later),
    then at least ``plan.iters`` timed ones (fewer for a call longer than
    its share of ``plan.budget_s``, at least one; more while under that
    share). Each implementation's times over all rounds."""
    times: dict[str, list[float]] = {impl: [] for impl in fns}
    order = list(fns)
    for round_ in range(plan.rounds):
        shift = round_ % max(1, len(order))
        for impl in order[shift:] + order[:shift]:
            if impl not in times:
                continue
            first = min(plan.warmup, max(REWARM, int(WARMUP_S / max(call_s[impl], 1e-9))))
            warmup = first if round_ == 0 else min(REWARM, plan.warmup)
            share = plan.budget_s / plan.rounds
            iters = max(1, min(plan.iters, int(share / max(call_s[impl], 1e-9)) + 1))
            try:
                times[impl] += time_calls(fns[impl], warmup, iters, share)
            except Exception as error:  # an implementation that cannot run this case
                log(f"  {label} {impl}: skipped ({type(error).__name__}: {str(error)[:160]})")
                del times[impl]
    return times


def checked(
    fns: dict[str, Callable[[], object]], expected, log, label: str
) -> tuple[dict[str, Callable[[], object]], dict[str, float], dict[str, float]]:
    """The implementations whose first call runs (torch.compile compiles
    there), each one's largest difference from the operator's output
    (``expected``; None: not compared) and the seconds of its second call."""
    kept, diffs, call_s = {}, {}, {}
    for impl, fn in fns.items():
        try:
            output = fn()
            start = time.perf_counter()
            fn()
            call_s[impl] = time.perf_counter() - start
        except Exception as error:
            log(f"  {label} {impl}: skipped ({type(error).__name__}: {str(error)[:160]})")
            continue
        kept[impl] = fn
        diff = output_diff(output, expected) if impl != "copy" else None
        if diff is not None:
            diffs[impl] = diff
    return kept, diffs, call_s


def output_diff(output, expected: torch.Tensor | None) -> float | None:
    """The largest difference of a call's output (a tensor, or ONNX
    Runtime's list of arrays) from ``expected``, in float64 (bfloat16 too,
    which NumPy lacks); None without an output to compare (ONNX Runtime in
    bfloat16 keeps its outputs in the IO binding)."""
    got = output[0] if isinstance(output, list | tuple) and output else output
    if expected is None or got is None:
        return None
    return max_abs_diff(got, expected)


def export_models(case: OpCase, example: tuple, plan: Plan, log) -> dict[str, bytes]:
    """The one-op module exported by each ONNX Runtime implementation's route."""
    models = {}
    for impl in ORT_IMPLS:
        if impl not in plan.impls:
            continue
        key = export_key(impl)
        try:
            with native_stdout_silenced():
                models[impl] = export_onnx(case.module(example), tensors_of(example), route=key)
        except Exception as error:
            log(f"  {case.name}: no export by the {key} route, so no {impl} rows ({error})")
    return models


def run_case(
    fns: dict[str, Callable[[], object]],
    expected,
    nbytes: int,
    meta: dict,
    plan: Plan,
    log,
    results: list[Result],
) -> None:
    label = (
        f"{meta['op']} {'x'.join(map(str, meta['shape']))} {meta['dtype']} "
        f"{meta['threads']}t {meta['pass_']}"
    )
    fns, diffs, call_s = checked(fns, expected, log, label)
    for impl, times in time_rounds(fns, plan, log, label, call_s).items():
        result = result_of(meta, impl, times, nbytes, max_abs_diff=diffs.get(impl))
        results.append(result)
        diff = f", max abs diff {diffs[impl]:.1e}" if impl in diffs else ""
        log(f"  {label} {impl}: median {result.median_us:.1f} us, p99 {result.p99_us:.1f} us{diff}")


def bound(fn: Callable, args: tuple) -> Callable[[], object]:
    return lambda: fn(*args)


def measure_op(name: str, plan: Plan, log) -> list[Result]:
    """Every implementation of operator ``name`` (a registered card) at
    every size, dtype and thread count of ``plan``."""
    case = OpCase(name)
    composite = case.card.composite or case.card.reference
    call = case.card.call
    want = set(plan.impls)
    results: list[Result] = []
    for dtype in plan.dtypes:
        try:
            with torch.no_grad():
                call(*case.inputs([2, 8], DTYPES[dtype]))
        except Exception as error:  # a dtype the operator does not take
            log(f"{case.name} {dtype}: not timed ({type(error).__name__}: {str(error)[:200]})")
            continue
        for shape in plan.sizes.values():
            example = case.inputs(shape, DTYPES[dtype])
            models = export_models(case, example, plan, log)
            for threads in plan.threads:
                torch.set_num_threads(threads)
                meta = dict(op=case.name, shape=list(shape), dtype=dtype, threads=threads)
                args = case.inputs(shape, DTYPES[dtype])
                fns: dict[str, Callable[[], object]] = {}
                if "torch_composite" in want:
                    fns["torch_composite"] = bound(composite, args)
                if "torch_compile" in want:
                    fns["torch_compile"] = bound(fresh_compile(composite), args)
                if "opbridge_torch" in want:
                    fns["opbridge_torch"] = bound(call, args)
                for impl, model in models.items():
                    try:
                        session = impl_session(model, impl, threads)
                    except Exception as error:
                        log(f"  {case.name} {dtype} {impl}: no session ({error})")
                        continue
                    fns[impl] = impl_runner(session, tensors_of(args), impl)
                nbytes = case.min_bytes(args, "fwd")
                if "copy" in want:
                    fns["copy"] = copy_call(nbytes)
                with torch.no_grad():
                    expected = call(*args)
                    expected = expected[0] if isinstance(expected, tuple | list) else expected
                    run_case(fns, expected, nbytes, {**meta, "pass_": "fwd"}, plan, log, results)
                if not (plan.backward and case.backward):
                    continue
                grad_args = case.inputs(shape, DTYPES[dtype], requires_grad=True)
                with torch.no_grad():
                    output = call(*grad_args)
                if isinstance(output, torch.Tensor):
                    grad = torch.ones_like(output)
                else:
                    grad = tuple(torch.ones_like(o) for o in output)
                fns = {}
                if "torch_composite" in want:
                    fns["torch_composite"] = fwd_bwd(composite, grad_args, grad)
                if "torch_compile" in want:
                    fns["torch_compile"] = fwd_bwd(fresh_compile(composite), grad_args, grad)
                if "opbridge_torch" in want:
                    fns["opbridge_torch"] = fwd_bwd(call, grad_args, grad)
                nbytes = case.min_bytes(grad_args, "fwd+bwd")
                if "copy" in want:
                    fns["copy"] = copy_call(nbytes)
                run_case(fns, None, nbytes, {**meta, "pass_": "fwd+bwd"}, plan, log, results)
    return results


# ---------------------------------------------------------------- report


def _cases(results: list[dict]) -> dict[tuple, dict[str, dict]]:
    cases: dict[tuple, dict[str, dict]] = {}
    for r in results:
        key = (r["op"], tuple(r["shape"]), r["dtype"], r["threads"], r["pass"])
        cases.setdefault(key, {})[r["impl"]] = r
    return cases


def ratio(impls: dict[str, dict], alternative: str, base: str) -> float | None:
    """The alternative's median time over base's (above 1: base is faster)."""
    if alternative not in impls or base not in impls:
        return None
    return impls[alternative]["median_us"] / impls[base]["median_us"]


def verdicts(report: dict) -> list[dict]:
    """The issue's targets (TARGETS, OP_TARGETS) for every operator at the
    dram size (its largest shape), at each target's dtype and each thread
    count."""
    cases = _cases(report["results"])
    dram = report["sizes"].get("dram")
    rows = []
    for (op, shape, dtype, threads, pass_), impls in cases.items():
        if dram is None or list(shape) != dram:
            continue
        for target_pass, against, goal, target_dtype in OP_TARGETS.get(op.split("::")[-1], TARGETS):
            if target_pass != pass_ or target_dtype != dtype:
                continue
            measured = ratio(impls, against, "opbridge_torch")
            if measured is None:
                continue
            what = "share of copy bandwidth" if against == "copy" else f"vs {against}"
            rows.append(
                dict(
                    op=op,
                    shape=list(shape),
                    dtype=dtype,
                    threads=threads,
                    target=f"{pass_}: opbridge_torch {what}",
                    goal=goal,
                    measured=measured,
                    met=measured >= goal,
                )
            )
    return rows


def _cell(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.0f}%" if percent else f"{value:.2f}x"


def markdown(report: dict) -> str:
    """The run's machine and load, one row per case, then the verdicts."""
    start, end = report["load_average"]["start"], report["load_average"]["end"]
    forced = report.get("forced_simd_target")
    lines = [
        f"Machine: {report['machine']}; allocator: {report['allocator']}; "
        + (f"the user libraries' SIMD target forced to {forced}; " if forced else "")
        + f"threads {', '.join(map(str, report['threads']))}; {report['rounds']} rounds.",
        f"Load average (1, 5, 15 min): {', '.join(f'{v:.2f}' for v in start)} at the start, "
        f"{', '.join(f'{v:.2f}' for v in end)} at the end, on {os.cpu_count()} logical CPUs "
        "(other work on the machine slows every implementation; the rounds spread it over all).",
    ]
    dram, llc = report["sizes"].get("dram"), report["llc_bytes"]
    if dram and dram[0] * dram[1] * 4 < 4 * llc:
        lines.append(
            f"A float32 tensor of the dram size is {dram[0] * dram[1] * 4 >> 20} MiB, under 4x "
            f"the last-level cache sysfs reports ({llc >> 20} MiB): part of it may stay in "
            "cache; the copy moves the same bytes, so % copy still compares like with like."
        )
    lines += [
        "",
        "Ratios: the alternative's median over opbridge_torch's (above 1: the user's operator "
        "is faster); ort_standard / ort_custom: the standard route's over the custom route's; "
        "% copy: share of the bandwidth of a copy moving the same bytes.",
    ]
    cases = _cases(report["results"])
    if cases:
        lines += [
            "",
            "| op | shape | dtype | threads | pass | opbridge_torch us | % copy "
            "| x torch_composite | x torch_compile | x ort_standard | ort_custom us "
            "| ort_custom % copy | ort_standard / ort_custom | copy us |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for (op, shape, dtype, threads, pass_), impls in cases.items():
        ob, oc, cp = impls.get("opbridge_torch"), impls.get("ort_custom"), impls.get("copy")

        def us(entry):
            return "-" if entry is None else f"{entry['median_us']:.1f}"

        lines.append(
            f"| {op} | {'x'.join(map(str, shape))} | {dtype} | {threads} | {pass_} | {us(ob)} "
            f"| {_cell(ratio(impls, 'copy', 'opbridge_torch'), True)} "
            f"| {_cell(ratio(impls, 'torch_composite', 'opbridge_torch'))} "
            f"| {_cell(ratio(impls, 'torch_compile', 'opbridge_torch'))} "
            f"| {_cell(ratio(impls, 'ort_standard', 'opbridge_torch'))} | {us(oc)} "
            f"| {_cell(ratio(impls, 'copy', 'ort_custom'), True)} "
            f"| {_cell(ratio(impls, 'ort_standard', 'ort_custom'))} | {us(cp)} |"
        )
    rows = report["verdicts"]
    if rows:
        lines += [
            "",
            "| op | shape | dtype | threads | target | goal | measured | |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for v in rows:
            percent = "copy" in v["target"]
            lines.append(
                f"| {v['op']} | {'x'.join(map(str, v['shape']))} | {v.get('dtype', 'float32')} "
                f"| {v['threads']} "
                f"| {v['target']} | >= {_cell(v['goal'], percent)} "
                f"| {_cell(v['measured'], percent)} | {'met' if v['met'] else '**missed**'} |"
            )
        lines += ["", f"{sum(v['met'] for v in rows)} of {len(rows)} targets met."]
    if report["not_found"]:
        lines += ["", *(f"- {line}" for line in report["not_found"])]
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def force_simd_target(qualified: str, target: str, log) -> None:
    """Runs the kernels of the library behind ``qualified`` on SIMD target
    ``target`` (one of the library's simd_targets())."""
    library = library_for_namespace(qualified.split("::")[0])
    module = getattr(library, "module", None)
    if module is None or not hasattr(module, "set_simd_target"):
        log(f"{qualified}: its library cannot force a SIMD target; its best one runs")
        return
    module.set_simd_target(target)
    log(f"{qualified}: SIMD target {module.simd_target()} (of {', '.join(module.simd_targets())})")


def run(args: argparse.Namespace, log=print) -> dict:
    plan = plan_for(args)
    allocator = "default" if args.default_allocator else tune_allocator()
    log(f"machine: {machine_description()}; allocator: {allocator}")
    load_start = os.getloadavg()
    threads_before = torch.get_num_threads()
    results: list[Result] = []
    not_found = []
    try:
        for name in args.ops:
            try:
                qualified = resolve_op(name, args.build_dir, log)
            except OpNotFound as error:
                log(f"{error}; skipped")
                not_found.append(str(error))
                continue
            if args.simd_target:
                force_simd_target(qualified, args.simd_target, log)
            results += measure_op(qualified, plan, log)
    finally:
        torch.set_num_threads(threads_before)
    report = {
        "machine": machine_description(),
        "simd_target": _C.simd_target(),
        "forced_simd_target": args.simd_target or None,
        "allocator": allocator,
        "threads": plan.threads,
        "rounds": plan.rounds,
        "sizes": plan.sizes,
        "llc_bytes": last_level_cache_bytes(),
        # 1, 5 and 15 minute load averages at the start and at the end.
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "results": [r.to_json() for r in results],
        "not_found": not_found,
    }
    report["verdicts"] = verdicts(report)
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--ops",
        nargs="+",
        default=list(DEFAULT_OPS),
        help=f"user operators ({', '.join(USER_OPS)}) or any registered card's name",
    )
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["float32"])
    p.add_argument("--sizes", nargs="+", choices=["cache", "dram"], default=None)
    p.add_argument("--dram-rows", type=int, default=8192, help="rows of the dram size (x 4096)")
    p.add_argument("--impls", nargs="+", choices=list(IMPLS), default=list(IMPLS))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warmup", type=int, default=20, help="calls before the first round's block")
    p.add_argument("--iters", type=int, default=3, help="minimum timed calls per block")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per impl")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument(
        "--simd-target", default="", help="the user libraries' SIMD target (default: the best)"
    )
    p.add_argument("--default-allocator", action="store_true")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few calls (proves it runs)")
    p.add_argument("--build-dir", type=Path, default=ROOT / "build" / "user_ops")
    p.add_argument("--json", type=Path, default=None, help=f"default: {RESULTS}/user_ops.json")
    p.add_argument("--markdown", type=Path, default=None, help=f"default: {RESULTS}/user_ops.md")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    report = run(args, log=lambda line: print(line, flush=True))
    table = markdown(report)
    print()
    print(table)
    if not args.quick:
        args.json = args.json or RESULTS / "user_ops.json"
        args.markdown = args.markdown or RESULTS / "user_ops.md"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table + "\n")
    return 0 if report["results"] else 1


if __name__ == "__main__":
    sys.exit(main())
