"""The machine the benchmark runs on, and how a call is timed."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from opbridge._library import simd_target

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
        f"SIMD target {simd_target()}, torch {torch.__version__}"
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


# Untimed calls after the warm-up's, at most, while a call still compiles
# (torch.compile's first call, its backward on the first backward pass, a
# recompile when a guard fails): the timed calls start only after a call that
# compiled nothing.
SETTLE_CALLS = 20


def compilations() -> int:
    """How many compilations torch.compile has done in this process so far:
    frames dynamo compiled (the first call, and a recompile on a new shape,
    grad mode or ``requires_grad``) and graphs inductor compiled or loaded
    from its cache (the forward's and, on the first backward pass, the
    backward's)."""
    if "torch._dynamo" not in sys.modules:  # nothing compiled yet
        return 0
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return counters["frames"]["total"] + sum(
        inductor[key] for key in ("fxgraph_cache_miss", "fxgraph_cache_hit", "fxgraph_cache_bypass")
    )


class StillCompilingError(RuntimeError):
    """A call that torch.compile compiled again on every call of the
    warm-up, or during the timed calls."""


def warm_up(fn: Callable[[], object], calls: int) -> int:
    """``calls`` untimed calls of ``fn``, then more (SETTLE_CALLS at most)
    until a call compiles nothing: with torch.compile, the timed calls that
    follow time the compiled code, not its compilation. Returns the calls
    made; StillCompilingError when every call compiled."""
    made = 0
    while True:
        before = compilations()
        fn()
        made += 1
        compiled = compilations() != before
        if made >= calls and not compiled:
            return made
        if made >= calls + SETTLE_CALLS:
            raise StillCompilingError(
                f"torch.compile compiled on each of {SETTLE_CALLS} calls after the "
                f"{calls} warm-up calls (a guard that fails on every call?); not timed"
            )


def time_calls(fn: Callable[[], object], warmup: int, iters: int, budget_s: float) -> list[float]:
    """Per-call times in microseconds: ``warmup`` untimed calls and more
    until one compiles nothing (:func:`warm_up`; torch.compile's first call
    compiles even at ``warmup=0``), then at least ``iters`` timed ones (more
    while under ``budget_s``). Timed calls that compiled are timed again
    once, then StillCompilingError."""
    warm_up(fn, warmup)
    for _ in range(2):
        before = compilations()
        times = []
        deadline = time.perf_counter() + budget_s
        while len(times) < iters or (time.perf_counter() < deadline and len(times) < 100 * iters):
            start = time.perf_counter_ns()
            fn()
            times.append((time.perf_counter_ns() - start) / 1e3)
        if compilations() == before:
            return times
    raise StillCompilingError(
        f"torch.compile compiled during the timed calls, twice ({iters} calls or more "
        "after a warm-up call that compiled nothing); not timed"
    )


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
