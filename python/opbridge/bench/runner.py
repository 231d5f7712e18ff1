"""The benchmark run: every case at every size, thread count and implementation."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

import opbridge
from opbridge import runtimes
from opbridge._library import simd_target
from opbridge.bench import models as bench_models
from opbridge.bench.cases import (
    DTYPES,
    HF_SETTINGS,
    RUNTIME_IMPLS,
    RUNTIME_ROUTES,
    RUNTIME_SETTINGS,
    TORCH_FWD_IMPLS,
    TORCH_IMPLS,
    OpCase,
    Result,
    export_key,
    tensors_of,
)
from opbridge.bench.machine import (
    last_level_cache_bytes,
    machine_description,
    measure_copy_gbps,
    summarize,
    time_calls,
    tune_allocator,
)
from opbridge.bench.sessions import (
    export_onnx,
    fused_ops,
    hf_impls,
    route_label,
    runtime_impls,
)
from opbridge.export import routes
from opbridge.ops.rms_norm import CARD as RMS_NORM_CARD

# ---------------------------------------------------------------- demo model


def demo_variants():
    """The demo model with its opbridge modules swapped for each alternative."""
    from opbridge.demo import build_demo

    class CompositeNorm(nn.Module):
        def __init__(self, source):
            super().__init__()
            self.weight, self.bias, self.eps = source.weight, source.bias, source.eps

        def forward(self, x):
            return RMS_NORM_CARD.composite(x, self.weight, self.bias, self.eps)

    class BuiltinNorm(nn.Module):
        def __init__(self, source):
            super().__init__()
            self.norm = nn.RMSNorm(source.weight.shape[0], eps=source.eps)
            self.norm.weight = source.weight
            self.bias = source.bias

        def forward(self, x):
            y = self.norm(x)
            return y + self.bias if self.bias is not None else y

    class CompositeClamp(nn.Module):
        def __init__(self, source):
            super().__init__()
            self.scale, self.min_val, self.max_val = source.scale, source.min_val, source.max_val

        def forward(self, x):
            return torch.clamp(x * self.scale, self.min_val, self.max_val)

    class BuiltinClamp(CompositeClamp):
        def forward(self, x):
            return torch.mul(x, self.scale).clamp_(self.min_val, self.max_val)

    def swapped(model, norm_cls, clamp_cls):
        import copy

        model = copy.deepcopy(model)
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, opbridge.nn.RMSNorm):
                    setattr(parent, name, norm_cls(child))
                elif isinstance(child, opbridge.nn.ScaledClamp):
                    setattr(parent, name, clamp_cls(child))
        return model

    model, _ = build_demo()
    composite = swapped(model, CompositeNorm, CompositeClamp)
    return {
        "opbridge_torch": model,
        "torch_composite": composite,
        "torch_builtin": swapped(model, BuiltinNorm, BuiltinClamp),
        "torch_compile": torch.compile(composite, dynamic=False),
    }


# ---------------------------------------------------------------- runner


@dataclass
class Settings:
    thread_counts: list[int]
    dtypes: list[str]
    ops: list[str]
    sizes: dict[str, list[int]]
    model_sizes: dict[str, list[int]]
    warmup: int
    iters: int
    budget_s: float
    backward: bool
    impls: list[str]
    # End-to-end models (bench_models.MODEL_NAMES), at toy sizes when quick_models.
    models: list[str] = dataclasses.field(default_factory=list)
    quick_models: bool = False


def op_sizes(quick: bool) -> dict[str, list[int]]:
    if quick:
        return {"small": [1, 64], "cache": [8, 256]}
    llc = last_level_cache_bytes()
    cols = 4096
    dram_rows = math.ceil(4 * llc / (cols * 4) / 64) * 64  # x alone >= 4x LLC in float32
    return {"small": [1, cols], "cache": [64, cols], "dram": [dram_rows, cols]}


def time_back_to_back(
    fns: dict[str, Callable[[], object]], settings: Settings, log, label: str
) -> dict[str, list[float]]:
    """Each implementation in turn: its warm-up, then its timed calls.
    Back to back rather than interleaved: interleaving puts PyTorch's OpenMP
    workers and ONNX Runtime's pool threads, which both spin for a while
    after a parallel region, in each other's way on a small machine."""
    times: dict[str, list[float]] = {}
    for impl, fn in fns.items():
        try:
            times[impl] = time_calls(fn, settings.warmup, settings.iters, settings.budget_s)
        except Exception as error:  # an implementation that cannot run this case
            log(f"  {label} {impl}: skipped ({type(error).__name__}: {str(error)[:120]})")
    return times


def run_case(
    label,
    fns: dict[str, Callable[[], object]],
    settings,
    meta,
    nbytes,
    log,
    results,
    extra: dict[str, dict] | None = None,
):
    """Times ``fns`` and appends one Result each; ``extra`` holds more
    fields of an implementation's Result (``fused``, ``max_abs_diff``)."""
    extra = extra or {}
    for impl, times in time_back_to_back(fns, settings, log, label).items():
        result = result_of(meta, impl, times, nbytes, **extra.get(impl, {}))
        results.append(result)
        fused = extra.get(impl, {}).get("fused")
        note = f" [{', '.join(fused) or 'no ONNX Runtime operators'}]" if fused is not None else ""
        log(f"  {label} {impl}: median {result.median_us:.1f} us, p99 {result.p99_us:.1f} us{note}")


def result_of(meta: dict, impl: str, times, nbytes: int, **extra) -> Result:
    """The Result of ``impl``'s call times for the case ``meta`` describes,
    which moves ``nbytes`` per call; ``extra`` holds more of its fields."""
    median, p99 = summarize(times)
    return Result(
        **meta,
        impl=impl,
        median_us=median,
        p99_us=p99,
        gbps=nbytes / (median * 1e3),
        **extra,
    )


def torch_impls(
    case: OpCase, want: set[str], wrap: Callable, backward: bool = False
) -> dict[str, Callable]:
    """The wanted PyTorch implementations of `case` that exist, each wrapped
    into a no-argument call."""
    fns = {}
    for impl in TORCH_IMPLS if backward else TORCH_IMPLS + TORCH_FWD_IMPLS:
        fn = case.torch_fn(impl) if impl in want else None
        if fn is not None:
            fns[impl] = wrap(fn)
    return fns


def fwd_bwd(fn, args, grad):
    """One forward and backward pass; ``grad`` is the output's gradient (a
    tuple of one per output for an op with several)."""
    tensors = tensors_of(args)

    def step():
        for a in tensors:
            a.grad = None
        output = fn(*args)
        if isinstance(output, torch.Tensor):
            output.backward(grad)
        else:
            torch.autograd.backward(list(output), list(grad))

    return step


@dataclass
class Timing:
    """What :func:`time_call` measured: the median and p99 of single calls
    (microseconds), every timed call's time, and the allocator in use."""

    median_us: float
    p99_us: float
    times_us: list[float]
    allocator: str

    def __str__(self) -> str:
        return (
            f"median {self.median_us:.1f} us, p99 {self.p99_us:.1f} us over "
            f"{len(self.times_us)} calls (allocator: {self.allocator})"
        )


def time_call(
    fn: Callable,
    *args,
    backward: bool = False,
    warmup: int = 50,
    iters: int = 20,
    budget_s: float = 1.0,
    threads: int | None = None,
    default_allocator: bool = False,
) -> Timing:
    """Times ``fn(*args)`` as ``opbridge bench`` times an implementation:
    glibc's allocator tuned first (:func:`~opbridge.bench.tune_allocator`,
    for the rest of the process, so a DRAM-sized output is not page-faulted
    in anew on every call; ``default_allocator=True`` leaves it), ``warmup``
    untimed calls and more until a call compiles nothing (a
    ``torch.compile``'d ``fn`` is compiled and warmed before any call is
    timed), then at least ``iters`` timed calls (more while under
    ``budget_s`` seconds); the median and p99 of single calls.

    The forward pass runs under ``torch.no_grad()``. ``backward=True`` times
    forward and backward instead, as the bench's ``fwd+bwd`` rows do: a
    gradient of ones for every output, into the tensors of ``args`` that
    require grad (their ``.grad`` cleared before each call). ``threads``
    sets ``torch.set_num_threads`` for the measurement (the bench times at 1
    and at all threads)."""
    tensors = tensors_of(args)
    if backward and not any(t.requires_grad for t in tensors):
        raise ValueError(
            f"time_call({getattr(fn, '__name__', fn)!r}, backward=True): no tensor argument "
            f"requires grad (got {len(tensors)} tensors, none with requires_grad=True); "
            "pass the inputs to differentiate with requires_grad_()"
        )
    allocator = "default" if default_allocator else tune_allocator()
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        if backward:
            with torch.no_grad():
                output = fn(*args)
            outputs = (output,) if isinstance(output, torch.Tensor) else tuple(output)
            grad = tuple(torch.ones_like(o) for o in outputs)
            step = fwd_bwd(fn, args, grad[0] if isinstance(output, torch.Tensor) else grad)
            times = time_calls(step, warmup, iters, budget_s)
        else:
            with torch.no_grad():
                times = time_calls(lambda: fn(*args), warmup, iters, budget_s)
    finally:
        torch.set_num_threads(before)
    median, p99 = summarize(times)
    return Timing(median_us=median, p99_us=p99, times_us=times, allocator=allocator)


@contextlib.contextmanager
def native_stdout_silenced():
    """Keeps text that native code writes to file descriptor 1 (the legacy
    exporter prints the whole graph when an operator has no symbolic) off
    the report."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def export_models(
    case: OpCase, example: tuple, log, label: str, failed: set[str]
) -> dict[str, bytes]:
    """The case's ONNX model by each route that exports. An operator of
    another library exports only once an ONNX symbolic is registered for it:
    when it has none, one note per route says so and later sizes skip it
    (``failed`` holds those routes)."""
    models = {}
    foreign = "::" in case.name
    for route in RUNTIME_ROUTES:
        if route in failed:
            continue
        try:
            with native_stdout_silenced() if foreign else contextlib.nullcontext():
                models[route] = export_onnx(case.module(example), tensors_of(example), route=route)
        except Exception as error:
            if not foreign:
                log(f"  export {label} {route_label(route)}: failed ({error})")
                continue
            failed.add(route)
            log(
                f"  {case.name}: no ONNX export by the {route_label(route)}, so no ORT rows from "
                f"it ({type(error).__name__}: {str(error).strip()[:120]}...); opbridge.export "
                f"exports opbridge's own operators, {case.name} needs an ONNX symbolic "
                "registered for it"
            )
    return models


def run_benchmark(settings: Settings, log=print) -> dict:
    load_start = os.getloadavg()
    results: list[Result] = []
    profiles: list[dict] = []
    max_threads = max(settings.thread_counts)
    torch.set_num_threads(max_threads)
    copy_bytes = max(64 << 20, 2 * math.prod(max(settings.sizes.values(), key=math.prod)) * 4)
    copy_gbps = measure_copy_gbps(copy_bytes, settings.warmup, settings.iters)
    log(f"copy bandwidth ({max_threads} threads): {copy_gbps:.1f} GB/s")
    copy_args = (copy_bytes, settings.warmup, settings.iters)
    want = set(settings.impls)

    for op_name in settings.ops:
        case = OpCase(op_name)
        failed_routes: set[str] = set()
        for dtype in settings.dtypes:
            for size_name, shape in settings.sizes.items():
                models = {}
                if want & set(RUNTIME_IMPLS):
                    # Static shapes, as a deployed model would usually have.
                    example = case.inputs(shape, DTYPES[dtype])
                    models = export_models(
                        case, example, log, f"{case.name} {dtype}", failed_routes
                    )
                extra = {impl: {"fused": ops} for impl, ops in fused_ops(models).items()}
                for threads in settings.thread_counts:
                    torch.set_num_threads(threads)
                    args = case.inputs(shape, DTYPES[dtype])
                    meta = dict(op=case.name, shape=shape, dtype=dtype, threads=threads)
                    fns = torch_impls(case, want, lambda fn, args=args: lambda: fn(*args))
                    fns |= runtime_impls(
                        models, want, threads, tensors_of(args), log, f"{case.name} {dtype}"
                    )
                    label = f"{case.name} {size_name} {shape} {dtype} {threads}t fwd"
                    with torch.no_grad():
                        run_case(
                            label,
                            fns,
                            settings,
                            {**meta, "pass_": "fwd"},
                            case.min_bytes(args, "fwd"),
                            log,
                            results,
                            extra,
                        )
                    if settings.backward and case.backward:
                        grad_args = case.inputs(shape, DTYPES[dtype], requires_grad=True)
                        with torch.no_grad():
                            output = case.card.call(*grad_args)
                        if isinstance(output, torch.Tensor):
                            grad = torch.ones_like(output)
                        else:
                            grad = tuple(torch.ones_like(o) for o in output)
                        fns = torch_impls(
                            case,
                            want,
                            lambda fn, a=grad_args, g=grad: fwd_bwd(fn, a, g),
                            backward=True,
                        )
                        label = f"{case.name} {size_name} {shape} {dtype} {threads}t fwd+bwd"
                        run_case(
                            label,
                            fns,
                            settings,
                            {**meta, "pass_": "fwd+bwd"},
                            case.min_bytes(grad_args, "fwd+bwd"),
                            log,
                            results,
                        )

    if settings.model_sizes:
        run_model(settings, want, log, results)
    descriptions: dict[str, str] = {}
    choices: dict[str, dict] = {}
    if settings.models:
        descriptions = run_end_to_end(settings, want, log, results, profiles, choices)
    torch.set_num_threads(max_threads)
    # The practical limit: the better of the copies at the start and the end.
    copy_gbps = max(copy_gbps, measure_copy_gbps(*copy_args))
    log(f"copy bandwidth ({max_threads} threads, best of start and end): {copy_gbps:.1f} GB/s")
    return {
        "copy_gbps": copy_gbps,
        "machine": machine_description(),
        "simd_target": simd_target(),
        # 1, 5 and 15 minute load averages at the start and at the end.
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "results": [r.to_json() for r in results],
        "models": descriptions,
        "profiles": profiles,
        "compile_choices": choices,
    }


def run_model(settings: Settings, want: set[str], log, results: list[Result]) -> None:
    variants = demo_variants()
    for size_name, shape in settings.model_sizes.items():
        models = {}
        if want & set(RUNTIME_IMPLS):
            example = (torch.randn(shape),)
            for route in RUNTIME_ROUTES:
                models[route] = export_onnx(variants["opbridge_torch"], example, route=route)
        extra = {impl: {"fused": ops} for impl, ops in fused_ops(models).items()}
        for threads in settings.thread_counts:
            torch.set_num_threads(threads)
            x = torch.randn(shape)
            fns = {}
            for impl in TORCH_IMPLS:
                if impl in want:
                    fns[impl] = lambda m=variants[impl], x=x: m(x)
            fns |= runtime_impls(models, want, threads, (x,), log, f"demo_model {size_name}")
            meta = dict(op="demo_model", shape=list(shape), dtype="float32", threads=threads)
            label = f"demo_model {size_name} {list(shape)} {threads}t fwd"
            with torch.no_grad():
                run_case(
                    label,
                    fns,
                    settings,
                    {**meta, "pass_": "fwd"},
                    2 * math.prod(shape) * 4,
                    log,
                    results,
                    extra,
                )


# Warm-up calls of an end-to-end model at most (torch.compile compiles in the
# output check before them), and calls under each profiler.
MODEL_WARMUP = 5
PROFILE_CALLS = 5


def max_abs_diff(output, expected: torch.Tensor) -> float:
    """Largest absolute difference of a call's output (a tensor, or ONNX
    Runtime's list of arrays) from ``expected``, in float64 (bfloat16 too,
    which NumPy lacks)."""
    import numpy as np

    got = output[0] if isinstance(output, list | tuple) else output
    got = got if isinstance(got, torch.Tensor) else torch.from_numpy(np.asarray(got))
    return float((got.detach().double() - expected.detach().double()).abs().max())


def compile_choice(case, log, choices: dict) -> Callable | None:
    """:func:`opbridge.compile` of the case's model with ``ops="auto"`` (the
    choice measured at the current thread count, logged and kept in
    ``choices`` by model), or None when it fails."""
    try:
        compiled = opbridge.compile(case.model, case.inputs, ops="auto")
    except Exception as error:
        log(f"  {case.name} opbridge_compile_auto: skipped ({type(error).__name__}: {error})")
        return None
    choice = compiled.opbridge_compile_choice
    decomposed = ", ".join(choice.decomposed) or "none"
    log(f"  {case.name} opbridge_compile_auto: decomposed {decomposed}")
    for line in choice.table().splitlines():
        log(f"    {line}")
    choices[case.name] = dataclasses.asdict(choice)
    return compiled


def end_to_end_exports(case, want: set[str], log) -> dict[str, bytes]:
    """The ONNX models of an end-to-end case that the wanted runtime
    implementations run, by export key: opbridge's exports
    (:func:`export_onnx`), or the case's own exporter's (hf_llama:
    transformers', which exports by opbridge's routes only, and exports
    transformers' model as it is for HF_SETTINGS' implementations, in
    ``models`` under their names)."""
    models: dict[str, bytes] = {}
    for route in RUNTIME_ROUTES:
        if not any(export_key(impl) == route for impl in want & set(RUNTIME_IMPLS)):
            continue
        if case.exports is not None and not case.exports.takes(route):
            log(
                f"  {case.name} {route_label(route)}: left out (transformers' exporter exports "
                "opbridge's operators by opbridge.export.route's routes only)"
            )
            continue
        try:
            if case.exports is not None:
                models[route] = case.exports.route_model(route)
            else:
                models[route] = export_onnx(case.model, case.inputs, route=route)
        except Exception as error:
            log(f"  export {case.name} {route_label(route)}: failed ({error})")
    for impl, config in HF_SETTINGS.items():
        if impl in want and case.exports is not None:
            try:
                models[impl] = case.exports.plain_model(**config)
            except Exception as error:
                log(f"  export {case.name} {impl}: failed ({error})")
    return models


def run_end_to_end(
    settings: Settings, want: set[str], log, results, profiles, choices: dict | None = None
) -> dict[str, str]:
    """Times each end-to-end model by each implementation (warm-up at most
    MODEL_WARMUP calls), with each output checked first against
    opbridge_torch's (against the case's ``plain`` model's where it has one:
    hf_llama's transformers model), and profiles opbridge_torch and
    ort_custom. Returns each model's description; ``choices`` gets
    opbridge_compile_auto's choice by model."""
    model_settings = dataclasses.replace(settings, warmup=min(settings.warmup, MODEL_WARMUP))
    choices = {} if choices is None else choices
    descriptions = {}
    for case in bench_models.build_cases(settings.models, quick=settings.quick_models):
        descriptions[case.name] = case.description
        log(f"{case.name}: {case.description}, input {case.shape} {case.dtype}")
        if case.plain is not None:
            composite = reference = case.plain
        else:
            composite, reference = bench_models.composite_twin(case.model), case.model
        with torch.no_grad():
            expected = reference(*case.inputs)
        models = end_to_end_exports(case, want, log)
        fused = fused_ops(models)
        eager = {"torch_composite": composite, "opbridge_torch": case.model}
        torch._dynamo.reset()
        for impl in ("torch_compile", "opbridge_compile_auto"):
            if impl in want and settings.quick_models:
                log(f"  {case.name} {impl}: left out at --quick sizes (compiling takes a minute)")
        if "torch_compile" in want and not settings.quick_models:
            eager["torch_compile"] = torch.compile(composite, dynamic=False)
        if "opbridge_compile" in want:
            eager["opbridge_compile"] = torch.compile(case.model, dynamic=False)
        if "opbridge_compile_auto" in want and not settings.quick_models:
            compiled = compile_choice(case, log, choices)
            if compiled is not None:
                eager["opbridge_compile_auto"] = compiled
        meta = dict(op=case.name, shape=case.shape, dtype=case.dtype, pass_="fwd")
        for threads in settings.thread_counts:
            torch.set_num_threads(threads)
            label = f"{case.name} {case.shape} {threads}t fwd"
            fns = {
                impl: (lambda m=module, x=case.inputs: m(*x))
                for impl, module in eager.items()
                if impl in want
            }
            args = case.named_inputs() if case.input_names else case.inputs
            fns |= hf_impls(models, want, threads, case.named_inputs(), log, case.name)
            fns |= runtime_impls(models, want, threads, args, log, case.name)
            with torch.no_grad():
                # Each implementation's output check, warm-up and timed calls
                # back to back (see time_back_to_back).
                for impl, fn in list(fns.items()):
                    try:
                        diff = max_abs_diff(fn(), expected)
                    except Exception as error:
                        log(f"  {label} {impl}: skipped ({type(error).__name__}: {error})")
                        del fns[impl]
                        continue
                    run_case(
                        label,
                        {impl: fn},
                        model_settings,
                        {**meta, "threads": threads},
                        case.min_bytes(expected),
                        log,
                        results,
                        {impl: {"max_abs_diff": diff, "fused": fused.get(impl)}},
                    )
                profile_case(case, threads, fns, models, log, profiles)
    return descriptions


def _runs_kernels(route: str) -> bool:
    """Whether a runtime implementation's route (or rewrite) runs the
    library's kernels: a route whose models need the operator library."""
    found = routes.routes().get(route)
    return found is not None and found.needs_library


def profile_case(case, threads: int, fns: dict, models: dict, log, profiles: list) -> None:
    """Shares of operator time of opbridge_torch (torch.profiler) and of
    each runtime's custom-route implementation whose runtime has a profiler
    (ort_custom: ONNX Runtime's), when they ran."""
    runs = {}
    if "opbridge_torch" in fns:
        runs["opbridge_torch"] = lambda: bench_models.torch_profile(
            fns["opbridge_torch"], PROFILE_CALLS
        )
    feeds = {name: t.numpy() for name, t in case.named_inputs().items()}
    for impl, (name, route, level) in RUNTIME_SETTINGS.items():
        runtime, model = runtimes.get(name), models.get(export_key(impl))
        if _runs_kernels(route) and impl in fns and model is not None and runtime.bench.profile:
            runs[impl] = functools.partial(
                bench_models.runtime_profile, runtime, model, feeds, threads, PROFILE_CALLS, level
            )
    for impl, run_profile in runs.items():
        try:
            with torch.no_grad():
                profile = run_profile()
        except Exception as error:
            log(f"  {case.name} {impl} {threads}t profile: failed ({error})")
            continue
        log(f"  {case.name} {impl} {threads}t profile: {profile.line()}")
        profiles.append(
            dict(
                op=case.name,
                shape=case.shape,
                threads=threads,
                impl=impl,
                opbridge_pct=profile.opbridge_pct,
                matmul_pct=profile.matmul_pct,
                other_pct=profile.other_pct,
                top=[[name, pct] for name, pct in profile.top],
            )
        )
