"""Benchmark: opbridge's operators, the demo model and end-to-end models
against what a user would pick instead, measured side by side in one
process on the same inputs.

Every operator comes from its card (``opbridge.ops.cards()``): inputs, call
and alternatives. ``--import MODULE`` loads a library that registers cards of
its own operators, which ``--ops`` then names as ``namespace::name``.

Implementations (names are stable; they appear in ``--json`` output):

- ``torch_composite``: the operator's formula in eager PyTorch (the card's
  ``composite``).
- ``torch_builtin``: PyTorch's own operator (the card's ``builtin``:
  ``F.rms_norm``; ``torch.clamp`` in place on ``x * scale``;
  ``torch.nn.RMSNorm`` in the model).
- ``torch_compile``: inductor on the composite (compiled and warmed up before
  timing).
- ``opbridge_torch``: the card's call (``torch.ops.opbridge.*``, or the
  operator of another library).
- ``opbridge_torch_out``: the same op's out= form
  (``torch.ops.<ns>.<op>.out``) writing into outputs allocated once, as a
  caller reusing its buffers would (forward only: out= forms take no
  gradients).
- ``ort_standard``: the standard ONNX route at ORT_ENABLE_ALL (ONNX Runtime's
  own fusions apply); ``ort_standard_nofusion``: the same at ORT_DISABLE_ALL;
  ``ort_custom``: the custom route (``opbridge`` domain nodes).
- ``ort_contrib``: the standard route at opset 20 rewritten by onnxscript's
  ``optimize_for_ort`` into ONNX Runtime's fused ``com.microsoft`` operators
  where its rules match, at ORT_ENABLE_ALL; ``ort_fused``: opbridge's ``ort``
  route, which emits ONNX Runtime's fused operators itself. Their results
  carry ``fused``: ONNX Runtime's own operators in the model they ran.

End-to-end models (``--models``; :mod:`opbridge.bench_models`):
``llama_prefill``, ``llama_decode`` and ``vision``, by ``torch_composite``
(the model with every opbridge module computed by its card's composite),
``opbridge_torch``, ``torch_compile`` (of the composite model) and the ONNX
Runtime implementations. Their results carry ``max_abs_diff`` (the output's
largest difference from ``opbridge_torch``), and the report's ``profiles``
the share of operator time in opbridge's operators and in matrix products
(``opbridge_torch`` under ``torch.profiler``, ``ort_custom`` under ONNX
Runtime's profiler).

Every case runs at one thread and at all threads (``torch.set_num_threads``
and ONNX Runtime's ``intra_op_num_threads``), after a warm-up, reporting the
median and p99 of single calls. A memory-copy measured in the same run gives
the machine's practical bandwidth; each result's GB/s counts the bytes the
operation must move at least (inputs read once, outputs written once).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

import opbridge
from opbridge import _C, bench_models
from opbridge._library import library_for_namespace
from opbridge.ops.rms_norm import composite as rms_norm_composite

HELP = (
    "benchmark the operators, the demo model and end-to-end models against PyTorch and ONNX "
    "Runtime alternatives"
)

TORCH_IMPLS = ("torch_composite", "torch_builtin", "torch_compile", "opbridge_torch")
# PyTorch implementations timed forward only.
TORCH_FWD_IMPLS = ("opbridge_torch_out",)
# Each ONNX Runtime implementation: the route its model is exported by and
# the session's graph optimization level.
ORT_SETTINGS = {
    "ort_standard": ("standard", "enable_all"),
    "ort_standard_nofusion": ("standard", "disable_all"),
    "ort_custom": ("custom", "enable_all"),
    # "contrib": the standard route rewritten into ONNX Runtime's contrib operators.
    "ort_contrib": ("contrib", "enable_all"),
    "ort_fused": ("ort", "enable_all"),
}
ORT_IMPLS = tuple(ORT_SETTINGS)
ORT_ROUTES = tuple(dict.fromkeys(route for route, _ in ORT_SETTINGS.values()))
IMPLS = TORCH_IMPLS + TORCH_FWD_IMPLS + ORT_IMPLS
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


@dataclass
class Result:
    op: str
    shape: list[int]
    dtype: str
    threads: int
    # "fwd" or "fwd+bwd"
    pass_: str
    impl: str
    median_us: float
    p99_us: float
    gbps: float
    # ONNX Runtime's own operators in the model (ort_contrib, ort_fused).
    fused: list[str] | None = None
    # End-to-end models: the output's largest difference from opbridge_torch's.
    max_abs_diff: float | None = None

    def to_json(self) -> dict:
        data = asdict(self)
        data["pass"] = data.pop("pass_")
        return {k: v for k, v in data.items() if v is not None}


# ---------------------------------------------------------------- machine


def last_level_cache_bytes() -> int:
    """Largest CPU cache of cpu0 (sysfs), 32 MiB when unknown."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        with contextlib.suppress(OSError, ValueError):
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
            best = max(best, int(text.rstrip("KMG")) * scale)
    return best or 32 << 20


def machine_description() -> str:
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{model}, {os.cpu_count()} logical CPUs, LLC {last_level_cache_bytes() >> 20} MiB, "
        f"SIMD target {_C.simd_target()}, torch {torch.__version__}"
    )


def tune_allocator() -> str:
    """Keeps freed large blocks in glibc's heap instead of returning them to
    the OS, so a 100 MB output is not page-faulted in anew on every call.
    ONNX Runtime's arena already reuses memory; without this, eager PyTorch
    (every torch_* and opbridge_torch result) spends most of a DRAM-sized
    call in the kernel's page-fault handler, which measures the allocator
    rather than the operator. A caching malloc (jemalloc, tcmalloc) does the
    same for a deployment."""
    import ctypes

    m_trim_threshold, m_mmap_max = -1, -4
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return "default (glibc not found)"
    ok = libc.mallopt(m_mmap_max, 0) == 1 and libc.mallopt(m_trim_threshold, 2**31 - 1) == 1
    return "glibc, freed blocks kept (mallopt)" if ok else "default (mallopt refused)"


# ---------------------------------------------------------------- timing


def time_calls(fn: Callable[[], object], warmup: int, iters: int, budget_s: float) -> list[float]:
    """Per-call times in microseconds: ``warmup`` untimed calls, then at
    least ``iters`` timed ones (more while under ``budget_s``)."""
    for _ in range(warmup):
        fn()
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < iters or (time.perf_counter() < deadline and len(times) < 100 * iters):
        start = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - start) / 1e3)
    return times


def summarize(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return statistics.median(ordered), p99


def measure_copy_gbps(nbytes: int, warmup: int, iters: int) -> float:
    """Read+write GB/s of a large tensor copy at the current thread count."""
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    median, _ = summarize(
        time_calls(lambda: dst.copy_(src), max(3, warmup // 10), max(10, iters), 0.5)
    )
    return 2 * nbytes / (median * 1e3)


# ---------------------------------------------------------------- operators


class OpCase:
    """One operator as the benchmark runs it, from its card: its
    implementations, inputs and the bytes a pass must move. ``name`` is a
    bare built-in name or a qualified ``namespace::name``."""

    def __init__(self, name: str):
        try:
            self.card = opbridge.ops.card(name)
        except KeyError:
            known = [c.display_name for c in opbridge.ops.cards().values()]
            raise ValueError(
                f"opbridge bench: unknown op {name!r}; choose from {known} (an operator of "
                "another library: --import the module that registers its card)"
            ) from None
        self.name = self.card.display_name

    @property
    def backward(self) -> bool:
        return self.card.bench_backward

    def inputs(self, shape, dtype, requires_grad=False) -> tuple:
        """The call's arguments (tensors and attributes) for size ``shape``."""
        return tuple(self.card.bench_inputs(list(shape), dtype, requires_grad))

    def torch_fn(self, impl: str) -> Callable | None:
        if impl == "torch_composite":
            return self.card.composite
        if impl == "torch_compile":
            return fresh_compile(self.card.composite) if self.card.composite else None
        if impl == "torch_builtin":
            return self.card.builtin
        if impl == "opbridge_torch_out":
            return self.out_call()
        return self.card.call

    def out_call(self) -> Callable | None:
        """The out= form, writing into outputs allocated on the first call;
        None for an operator without one (not built by opbridge)."""
        library = library_for_namespace(self.card.namespace)
        packet = getattr(getattr(torch.ops, self.card.namespace), self.card.name)
        if library is None or "out" not in packet.overloads():
            return None
        op = packet.out
        names = library.specs()[self.card.name]["outputs"]
        names = ["out"] if len(names) == 1 else names
        outs: dict[str, torch.Tensor] = {}

        def call(*args):
            if not outs:
                with torch.no_grad():
                    first = self.card.call(*args)
                first = first if isinstance(first, tuple | list) else (first,)
                outs.update(zip(names, (torch.empty_like(t) for t in first), strict=True))
            return op(*args, **outs)

        return call

    def module(self, args: tuple) -> nn.Module:
        """A module whose inputs are the tensors of ``args`` (the other
        arguments are fixed), for export."""
        call = self.card.call
        is_tensor = [isinstance(a, torch.Tensor) for a in args]

        class Op(nn.Module):
            def forward(self, *tensors):
                given = iter(tensors)
                return call(
                    *[next(given) if t else a for a, t in zip(args, is_tensor, strict=True)]
                )

        return Op()

    def min_bytes(self, args: tuple, pass_: str) -> int:
        """fwd: read every input once, write every output once. fwd+bwd
        adds: read each output's gradient and x, write grad_x (x-sized
        each)."""
        with torch.no_grad():
            outputs = self.card.call(*args)
        outputs = outputs if isinstance(outputs, tuple | list) else (outputs,)
        tensors = [t for t in (*args, *outputs) if isinstance(t, torch.Tensor)]
        fwd = sum(t.numel() * t.element_size() for t in tensors)
        x = tensors[0]
        return fwd if pass_ == "fwd" else fwd + (2 + len(outputs)) * x.numel() * x.element_size()


def tensors_of(args: tuple) -> tuple:
    return tuple(a for a in args if isinstance(a, torch.Tensor))


# ---------------------------------------------------------------- ONNX Runtime


def export_onnx(module: nn.Module, args: tuple, *, route: str) -> bytes:
    """Exports by ``route`` with the legacy exporter (quick), static shapes
    as a deployed model would usually have. ``route="contrib"``: the
    standard route at ``bench_models.CONTRIB_OPSET``, rewritten into ONNX
    Runtime's contrib operators."""
    names = [f"input_{i}" for i in range(len(args))]
    opset = bench_models.CONTRIB_OPSET if route == "contrib" else None
    with contextlib.redirect_stdout(io.StringIO()):
        proto = opbridge.onnx.export(
            module,
            args,
            route="standard" if route == "contrib" else route,
            opset=opset,
            dynamo=False,
            input_names=names,
            output_names=["y"],
        )
    if route == "contrib":
        proto, _ = bench_models.ort_contrib(proto)
    return proto.SerializeToString()


def fused_ops(models: dict[str, bytes]) -> dict[str, list[str]]:
    """Per ONNX Runtime implementation whose route emits ONNX Runtime's own
    operators (ort_contrib, ort_fused): the ones its exported model has."""
    import onnx

    fused = {}
    for impl, (route, _) in ORT_SETTINGS.items():
        if route in ("contrib", "ort") and route in models:
            fused[impl] = bench_models.contrib_ops(onnx.load_from_string(models[route]))
    return fused


def route_label(route: str) -> str:
    if route == "contrib":
        return f"standard route (opset {bench_models.CONTRIB_OPSET}, for ort_contrib)"
    return f"{route} route"


def ort_session(model: bytes, impl: str, threads: int):
    """A session for ONNX Runtime implementation ``impl`` at ``threads`` intra-op threads."""
    _, level = ORT_SETTINGS[impl]
    return opbridge.ort.InferenceSession(model, optimization_level=level, threads=threads)


def ort_runner(session, args: tuple) -> Callable[[], object]:
    """One call of the session on args. NumPy has no bfloat16, so such
    inputs go in through IO binding, as OrtValues over their bits, bound
    once; ONNX Runtime allocates the outputs on every call, as run() does."""
    names = [meta.name for meta in session.get_inputs()]
    if any(a.dtype == torch.bfloat16 for a in args):
        import onnxruntime
        from onnx import TensorProto

        binding = session.io_binding()
        values = []  # the bound OrtValues (and the memory they view) live as long as the call
        for name, a in zip(names, args, strict=True):
            a = a.detach().contiguous()
            if a.dtype == torch.bfloat16:
                bits = a.view(torch.int16).numpy().view("uint16")
                value = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
                    bits, TensorProto.BFLOAT16
                )
            else:
                value = onnxruntime.OrtValue.ortvalue_from_numpy(a.numpy())
            binding.bind_ortvalue_input(name, value)
            values.append(value)
        for meta in session.get_outputs():
            binding.bind_output(meta.name, "cpu")
        return lambda: (session.run_with_iobinding(binding), values)[0]
    feed = {name: a.detach().numpy() for name, a in zip(names, args, strict=True)}
    return lambda: session.run(None, feed)


def ort_impls(
    models: dict[str, bytes], want: set[str], threads: int, args: tuple, log, label: str
) -> dict[str, Callable[[], object]]:
    """The wanted ONNX Runtime implementations whose route exported, each a
    no-argument call on the tensors ``args``."""
    fns = {}
    for impl, (route, _) in ORT_SETTINGS.items():
        if impl in want and route in models:
            try:
                fns[impl] = ort_runner(ort_session(models[route], impl, threads), args)
            except Exception as error:
                log(f"  {label} {impl}: no session ({error})")
    return fns


# ---------------------------------------------------------------- demo model


def demo_variants():
    """The demo model with its opbridge modules swapped for each alternative."""
    from opbridge.demo import build_demo

    class CompositeNorm(nn.Module):
        def __init__(self, source):
            super().__init__()
            self.weight, self.bias, self.eps = source.weight, source.bias, source.eps

        def forward(self, x):
            return rms_norm_composite(x, self.weight, self.bias, self.eps)

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
        median, p99 = summarize(times)
        results.append(
            Result(
                **meta,
                impl=impl,
                median_us=median,
                p99_us=p99,
                gbps=nbytes / (median * 1e3),
                **extra.get(impl, {}),
            )
        )
        fused = extra.get(impl, {}).get("fused")
        note = f" [{', '.join(fused) or 'no ONNX Runtime operators'}]" if fused is not None else ""
        log(f"  {label} {impl}: median {median:.1f} us, p99 {p99:.1f} us{note}")


def fresh_compile(fn: Callable) -> Callable:
    """torch.compile with no compiled code left from earlier cases (dynamo
    caches per Python function and would hit its recompile limit)."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


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
    for route in ORT_ROUTES:
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
                f"it ({type(error).__name__}: {str(error).strip()[:120]}...); opbridge.onnx "
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
                if want & set(ORT_IMPLS):
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
                    fns |= ort_impls(
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
    descriptions = {}
    if settings.models:
        descriptions = run_end_to_end(settings, want, log, results, profiles)
    torch.set_num_threads(max_threads)
    # The practical limit: the better of the copies at the start and the end.
    copy_gbps = max(copy_gbps, measure_copy_gbps(*copy_args))
    log(f"copy bandwidth ({max_threads} threads, best of start and end): {copy_gbps:.1f} GB/s")
    return {
        "copy_gbps": copy_gbps,
        "machine": machine_description(),
        "simd_target": _C.simd_target(),
        # 1, 5 and 15 minute load averages at the start and at the end.
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "results": [r.to_json() for r in results],
        "models": descriptions,
        "profiles": profiles,
    }


def run_model(settings: Settings, want: set[str], log, results: list[Result]) -> None:
    variants = demo_variants()
    for size_name, shape in settings.model_sizes.items():
        models = {}
        if want & set(ORT_IMPLS):
            example = (torch.randn(shape),)
            for route in ORT_ROUTES:
                models[route] = export_onnx(variants["opbridge_torch"], example, route=route)
        extra = {impl: {"fused": ops} for impl, ops in fused_ops(models).items()}
        for threads in settings.thread_counts:
            torch.set_num_threads(threads)
            x = torch.randn(shape)
            fns = {}
            for impl in TORCH_IMPLS:
                if impl in want:
                    fns[impl] = lambda m=variants[impl], x=x: m(x)
            fns |= ort_impls(models, want, threads, (x,), log, f"demo_model {size_name}")
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
    Runtime's list of arrays) from ``expected``."""
    import numpy as np

    got = output[0] if isinstance(output, list | tuple) else output
    got = got.detach().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    return float(np.abs(got.astype(np.float64) - expected.numpy().astype(np.float64)).max())


def run_end_to_end(settings: Settings, want: set[str], log, results, profiles) -> dict[str, str]:
    """Times each end-to-end model by each implementation (warm-up at most
    MODEL_WARMUP calls), with each output checked against opbridge_torch's
    first, and profiles opbridge_torch and ort_custom. Returns each model's
    description."""
    model_settings = dataclasses.replace(settings, warmup=min(settings.warmup, MODEL_WARMUP))
    descriptions = {}
    for case in bench_models.build_cases(settings.models, quick=settings.quick_models):
        descriptions[case.name] = case.description
        log(f"{case.name}: {case.description}, input {case.shape} {case.dtype}")
        composite = bench_models.composite_twin(case.model)
        with torch.no_grad():
            expected = case.model(*case.inputs)
        models: dict[str, bytes] = {}
        for route in ORT_ROUTES:
            if any(ORT_SETTINGS[impl][0] == route for impl in want & set(ORT_IMPLS)):
                try:
                    models[route] = export_onnx(case.model, case.inputs, route=route)
                except Exception as error:
                    log(f"  export {case.name} {route_label(route)}: failed ({error})")
        fused = fused_ops(models)
        eager = {"torch_composite": composite, "opbridge_torch": case.model}
        if "torch_compile" in want and settings.quick_models:
            log(
                f"  {case.name} torch_compile: left out at --quick sizes (compiling takes a minute)"
            )
        elif "torch_compile" in want:
            torch._dynamo.reset()
            eager["torch_compile"] = torch.compile(composite, dynamic=False)
        meta = dict(op=case.name, shape=case.shape, dtype=case.dtype, pass_="fwd")
        for threads in settings.thread_counts:
            torch.set_num_threads(threads)
            label = f"{case.name} {case.shape} {threads}t fwd"
            fns = {
                impl: (lambda m=module, x=case.inputs: m(*x))
                for impl, module in eager.items()
                if impl in want
            }
            fns |= ort_impls(models, want, threads, case.inputs, log, case.name)
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


def profile_case(case, threads: int, fns: dict, models: dict, log, profiles: list) -> None:
    """Shares of operator time of opbridge_torch (torch.profiler) and
    ort_custom (ONNX Runtime's profiler), when they ran."""
    runs = {}
    if "opbridge_torch" in fns:
        runs["opbridge_torch"] = lambda: bench_models.torch_profile(
            fns["opbridge_torch"], PROFILE_CALLS
        )
    if "ort_custom" in fns and "custom" in models:
        feeds = {f"input_{i}": t.numpy() for i, t in enumerate(case.inputs)}
        level = ORT_SETTINGS["ort_custom"][1]
        runs["ort_custom"] = lambda: bench_models.ort_profile(
            models["custom"], feeds, threads, PROFILE_CALLS, level
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
    is faster; ORT columns: over ort_custom's; "% copy" is the share of the
    copy bandwidth reached; the last two columns: ONNX Runtime's own
    operators in ort_contrib's and ort_fused's models), then the end-to-end
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
            "| ort_fused ops |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]

    def base_cell(entry):
        if entry is None:
            return "-"
        return f"{entry['median_us']:.1f} ({100 * entry['gbps'] / copy:.0f}%)"

    def ratio(entry, base):
        if entry is None or base is None:
            return "-"
        return f"{entry['median_us'] / base['median_us']:.2f}x"

    for key, impls in cases.items():
        op, shape, dtype, threads, pass_ = key
        ob, oc = impls.get("opbridge_torch"), impls.get("ort_custom")
        lines.append(
            f"| {op} | {'x'.join(map(str, shape))} | {dtype} | {threads} | {pass_} | "
            f"{base_cell(ob)} | {ratio(impls.get('torch_composite'), ob)} | "
            f"{ratio(impls.get('torch_builtin'), ob)} | {ratio(impls.get('torch_compile'), ob)} | "
            f"{ratio(impls.get('opbridge_torch_out'), ob)} | "
            f"{base_cell(oc)} | {ratio(impls.get('ort_standard'), oc)} | "
            f"{ratio(impls.get('ort_standard_nofusion'), oc)} | "
            f"{ratio(impls.get('ort_contrib'), oc)} | {ratio(impls.get('ort_fused'), oc)} | "
            f"{fused_cell(impls.get('ort_contrib'))} | {fused_cell(impls.get('ort_fused'))} |"
        )
    models = models_markdown(report)
    if models:
        lines += ([""] if lines else []) + models
    return "\n".join(lines)


def models_markdown(report: dict) -> list[str]:
    """The end-to-end models' table: median and p99 per implementation, its
    ratio to opbridge_torch and to ort_custom (above 1: slower), the largest
    output difference from opbridge_torch, ONNX Runtime's own operators in
    the model; then each profile's shares."""
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


# ---------------------------------------------------------------- command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes and few iterations (proves it runs)"
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a Python module first (repeatable); a library registers its operators' "
        "cards (opbridge.ops.register_card) when imported",
    )
    parser.add_argument(
        "--ops",
        nargs="+",
        default=None,
        metavar="OP",
        help="operators: built-in names (" + ", ".join(opbridge.specs()) + ") or qualified "
        "names of registered cards (myops::my_op); default: every card",
    )
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=list(DTYPES))
    parser.add_argument(
        "--sizes", nargs="+", default=None, help="size names to run (small, cache, dram)"
    )
    parser.add_argument("--threads", nargs="+", type=int, default=None, help="default: 1 and all")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=list(IMPLS))
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per measurement")
    parser.add_argument("--iters", type=int, default=20, help="minimum timed calls")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls")
    parser.add_argument("--no-backward", action="store_true", help="forward only")
    parser.add_argument(
        "--no-model",
        action="store_true",
        help="skip the demo model (and the end-to-end models unless --models names them)",
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=None,
        choices=list(bench_models.MODEL_NAMES),
        metavar="MODEL",
        help="end-to-end models: " + ", ".join(bench_models.MODEL_NAMES) + " (all when none are "
        "named); without --ops, only these run. A full run includes all of them; --quick "
        "includes them only when asked, at toy sizes",
    )
    parser.add_argument(
        "--simd-target", default="", help="force a SIMD target (one of opbridge._C.simd_targets())"
    )
    parser.add_argument(
        "--default-allocator",
        action="store_true",
        help="leave glibc malloc untuned (large tensors page-faulted in on every call)",
    )
    parser.add_argument("--json", type=Path, help="write results as JSON")
    parser.add_argument("--plot", type=Path, help="write a PNG chart")
    parser.add_argument("--markdown", type=Path, help="write the ratio table as markdown")


def import_modules(names: list[str]) -> None:
    """Imports each module (from sys.path or the current directory)."""
    if names and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    for name in names:
        importlib.import_module(name)


def resolve_ops(names: list[str] | None) -> list[str]:
    """The benchmark's names of the ops asked for (bare for built-ins,
    qualified otherwise); every card when none are named."""
    if names is None:
        return [c.display_name for c in opbridge.ops.cards().values()]
    return [OpCase(name).name for name in names]


def end_to_end_models(args: argparse.Namespace) -> list[str]:
    """The end-to-end models to run: those named by ``--models`` (all when
    it names none); without ``--models``, all in a full run and none with
    ``--quick`` or ``--no-model``."""
    if args.models is not None:
        return list(dict.fromkeys(args.models or bench_models.MODEL_NAMES))
    return [] if args.quick or args.no_model else list(bench_models.MODEL_NAMES)


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
    except ImportError as error:
        print(f"opbridge bench: --import: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    _C.set_simd_target(args.simd_target)
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
        model_sizes={} if args.no_model or not ops else model_sizes,
        warmup=3 if args.quick and args.warmup == 50 else args.warmup,
        iters=3 if args.quick and args.iters == 20 else args.iters,
        budget_s=0.0 if args.quick else args.budget,
        backward=not args.no_backward,
        impls=args.impls,
        models=end_to_end_models(args),
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
