"""One tensor from ONNX Runtime against the same tensor from PyTorch: the
element-wise tolerance test, error measures and statistics, and the
default tolerances by dtype."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# Default tolerances (rtol, atol) by the dtype of the PyTorch output: float64
# gets torch.testing's, tight enough to catch a float32-sized error.
DEFAULT_TOLERANCE = (1e-5, 1e-5)
DEFAULT_TOLERANCE_FLOAT64 = (1e-7, 1e-7)


@dataclass
class Stats:
    min: float
    max: float
    mean: float
    var: float


@dataclass
class Comparison:
    """ONNX Runtime (``ort``) against PyTorch (``torch``, the reference) for one tensor."""

    name: str
    shape: list[int]
    passed: bool
    max_abs_err: float
    max_rel_err: float  # over elements with |torch| > atol; the others are atol's business
    cosine: float
    # max |ort - torch| / (atol + rtol * |torch|): at most 1 where every element passes
    tolerance_ratio: float
    mismatched: int  # elements that fail the tolerance
    torch: Stats | None
    ort: Stats | None
    detail: str = ""
    # Elements finite on both sides; with 0 nothing was compared, which fails.
    compared: int | None = None


class Tolerance:
    """(rtol, atol) for a compared tensor: the caller's for every dtype, or
    the default of the PyTorch tensor's dtype."""

    def __init__(self, rtol: float | None, atol: float | None):
        for name, value in (("rtol", rtol), ("atol", atol)):
            if value is not None and not (isinstance(value, int | float) and value >= 0):
                raise ValueError(
                    f"opbridge.verify: {name} must be a number >= 0 (or None for the default "
                    f"by dtype), got {value!r}"
                )

        def pick(default: tuple[float, float]) -> tuple[float, float]:
            return (
                float(rtol) if rtol is not None else default[0],
                float(atol) if atol is not None else default[1],
            )

        self.other = pick(DEFAULT_TOLERANCE)
        self.float64 = pick(DEFAULT_TOLERANCE_FLOAT64)

    def of(self, want: Any) -> tuple[float, float]:
        return self.float64 if np.asarray(want).dtype == np.float64 else self.other


def _stats(values: np.ndarray, finite: bool) -> Stats | None:
    if values.size == 0:
        return None
    if not finite:
        kept = values[np.isfinite(values)]
        values = kept if kept.size else values
    with np.errstate(invalid="ignore", over="ignore"):
        return Stats(
            float(values.min()), float(values.max()), float(values.mean()), float(values.var())
        )


def compare(name: str, got: Any, want: Any, rtol: float, atol: float) -> Comparison:
    """``got`` (ONNX Runtime) against ``want`` (PyTorch): passes when every
    element satisfies ``|got - want| <= atol + rtol * |want|`` (NaN matches
    NaN, an infinity matches the same infinity) and at least one element is
    finite on both sides (all NaN on both sides compares nothing, and fails).
    The relative error is taken over elements with ``|want| > atol``;
    statistics and cosine similarity over finite elements."""
    a = np.asarray(got, dtype=np.float64)
    b = np.asarray(want, dtype=np.float64)
    if a.shape != b.shape:
        inf = float("inf")
        a_finite, b_finite = bool(np.isfinite(a).all()), bool(np.isfinite(b).all())
        return Comparison(
            name, list(b.shape), False, inf, inf, 0.0, inf, int(b.size),
            _stats(b, b_finite), _stats(a, a_finite),
            detail=f"shape {list(a.shape)} in the runtime, {list(b.shape)} in PyTorch",
        )  # fmt: skip
    if a.size == 0:
        return Comparison(name, list(b.shape), True, 0.0, 0.0, 1.0, 0.0, 0, None, None)
    a, b = a.ravel(), b.ravel()
    a_finite, b_finite = bool(np.isfinite(a).all()), bool(np.isfinite(b).all())
    all_finite = a_finite and b_finite
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(a - b)
        abs_b = np.abs(b)
        if not all_finite:
            # A non-finite element matches only the same value (NaN matches NaN).
            special = ~(np.isfinite(a) & np.isfinite(b))
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            diff[special] = np.where(same[special], 0.0, np.inf)
            abs_b[special] = 0.0
        allowed = abs_b * rtol + atol
        ok = diff <= allowed
        # Where nothing is allowed, any difference is infinitely over it.
        ratio = np.divide(diff, allowed, out=np.where(diff > 0, np.inf, 0.0), where=allowed > 0)
        big = abs_b > atol
        rel = np.divide(diff, abs_b, out=np.where(diff > 0, np.inf, 0.0), where=big)
        rel[~big & np.isfinite(diff)] = 0.0
    finite = slice(None) if all_finite else ~special
    fa, fb = a[finite], b[finite]
    mismatched = int(ok.size - np.count_nonzero(ok))
    if fa.size == 0 and mismatched == 0:
        # The same NaN or Inf everywhere: not one number was compared.
        return Comparison(
            name, list(np.shape(want)), False, 0.0, 0.0, 0.0, 0.0, 0, None, None,
            detail=f"nothing compared: all {b.size} elements are NaN or infinite, the same in "
            "PyTorch and ONNX Runtime (are the inputs NaN?)",
            compared=0,
        )  # fmt: skip
    dot = float(np.einsum("i,i->", fa, fb))
    na, nb = math.sqrt(np.einsum("i,i->", fa, fa)), math.sqrt(np.einsum("i,i->", fb, fb))
    if na == 0.0 and nb == 0.0:
        cosine = 1.0
    elif na == 0.0 or nb == 0.0:
        cosine = 0.0
    else:
        cosine = dot / (na * nb)
    return Comparison(
        name=name,
        shape=list(np.shape(want)),
        passed=mismatched == 0,
        max_abs_err=float(diff.max()),
        max_rel_err=float(rel.max()),
        cosine=cosine,
        tolerance_ratio=float(ratio.max()),
        mismatched=mismatched,
        torch=_stats(b, b_finite),
        ort=_stats(a, a_finite),
        compared=int(fa.size),
    )


def shapes_differ(shapes: list[tuple[tuple, tuple]], where: str) -> str | None:
    """``shapes``: (in the runtime, in PyTorch) per compared value; the
    detail of a row that cannot be compared ("shapes differ: ..."), None
    when every pair agrees."""
    differ = [(got, want) for got, want in shapes if got != want]
    if not differ:
        return None
    return "shapes differ: " + ", ".join(
        f"{list(got)} in {where} vs {list(want)} in PyTorch" for got, want in differ
    )


def worse(a: Comparison | None, b: Comparison) -> bool:
    """Whether ``b`` is a worse result than ``a``."""
    if a is None:
        return True
    return (not b.passed, b.tolerance_ratio) > (not a.passed, a.tolerance_ratio)


def format_error(value: float | None) -> str:
    """An error for a table: ``-`` for none, ``0``, or three significant digits."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    return f"{value:.2e}"


def describe(c: Comparison | None) -> str:
    """A comparison in one line (its detail when it has one)."""
    if c is None:
        return "-"
    if c.detail:
        return c.detail
    return (
        f"max abs err {format_error(c.max_abs_err)}, max rel err {format_error(c.max_rel_err)}, "
        f"cosine {c.cosine:.6f}, {c.mismatched} elements out of tolerance"
    )
