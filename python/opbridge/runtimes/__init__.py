"""The runtimes a model with opbridge's operators runs in: one module per
runtime, registered here.

A :class:`Runtime` says how to open a session on a model with every loaded
operator library registered, which optimization levels it has and which of
them runs the graph as exported, how its thread count is set, how a model is
timed in it, and what ``opbridge doctor`` reports of it. Verify, bench,
``route="auto"`` and doctor take ``runtime=`` and read this registry; adding a
runtime is one module that defines ``RUNTIME = Runtime(...)``, one entry in
``_BUILTIN`` below, and its adapter's folder ``csrc/<adapter>_adapter/`` (its
sources and ``<adapter>.cmake``, which the SDK's CMake function finds); a
runtime defined outside opbridge calls :func:`register_runtime`.

A session follows ONNX Runtime's Python interface, the part verify and bench
use: ``get_inputs()`` and ``get_outputs()`` (objects with ``.name``) and
``run(None, feeds) -> list of arrays``. A runtime's session of a model with a
form it computes wrong (``Runtime.wrong_forms``) warns
(:class:`WrongFormWarning`), or refuses one of a large known error
(:class:`WrongFormError`), by ``Runtime.check_wrong_forms``; a model with
inputs or outputs of a dtype it computes in another (``Runtime.lowered_dtypes``)
warns (:class:`PrecisionWarning`), by ``Runtime.check_dtypes``.
"""

from __future__ import annotations

from opbridge.runtimes import onnxruntime, openvino
from opbridge.runtimes.base import (
    LARGE_ERROR,
    REPEATS,
    WARMUP,
    BenchHooks,
    ModelRewrite,
    PrecisionWarning,
    Runtime,
    WrongForm,
    WrongFormError,
    WrongFormUse,
    WrongFormWarning,
    median_ms,
    reporting_wrong_forms,
)

__all__ = [
    "DEFAULT",
    "LARGE_ERROR",
    "REPEATS",
    "WARMUP",
    "BenchHooks",
    "ModelRewrite",
    "PrecisionWarning",
    "Runtime",
    "WrongForm",
    "WrongFormError",
    "WrongFormUse",
    "WrongFormWarning",
    "get",
    "median_ms",
    "names",
    "register_runtime",
    "reporting_wrong_forms",
]

# The built-in runtimes. A runtime module imports its runtime's own package
# only when a session is made, so listing it here costs nothing at start-up.
_BUILTIN = (onnxruntime.RUNTIME, openvino.RUNTIME)
# Other names a runtime is known by.
_ALIASES = {"ort": "onnxruntime", "ov": "openvino"}
DEFAULT = "onnxruntime"

_REGISTERED: dict[str, Runtime] = {runtime.name: runtime for runtime in _BUILTIN}


def register_runtime(runtime: Runtime) -> Runtime:
    """Adds (or replaces) a runtime defined outside opbridge. Returns it."""
    _REGISTERED[runtime.name] = runtime
    return runtime


def names() -> tuple[str, ...]:
    """Every runtime's name: the built-in ones, then the registered ones."""
    return tuple(_REGISTERED)


def get(name: str | Runtime | None = None) -> Runtime:
    """The runtime ``name`` (or its other name, e.g. ``"ort"``; default
    ONNX Runtime); a ValueError naming the runtimes for any other."""
    if isinstance(name, Runtime):
        return name
    key = _ALIASES.get(name or DEFAULT, name or DEFAULT)
    if key not in _REGISTERED:
        raise ValueError(f"opbridge: runtime must be one of {names()}, got {name!r}")
    return _REGISTERED[key]


# transformers' OpenVINOExporter converts a patched model once it has the
# libraries' OpenVINO extensions: handed to it when it is imported (one of
# the import effects that opbridge's docstring lists).
openvino.install_transformers_door()
