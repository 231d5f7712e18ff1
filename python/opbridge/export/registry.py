"""torch's ONNX registry, built once per opset in a process.

``torch.onnx.export(..., dynamo=True)`` builds its registry of ATen-to-ONNX
functions anew on every call (``ONNXRegistry.from_torchlib``): it reads and
parses the source of each of onnxscript's torchlib functions (about 500) and
infers each one's signature: 0.6 to 1.4 s on a quiet CPU core, more on a
busy one (``benchmarks/export_time.py``). The registry depends only on the
opset and on the functions registered with torch's and onnxscript's
torchlib, so while :func:`reused_torchlib_registry` is active, the first
export at an opset builds it as torch does and every later one gets a copy:
the same functions, in lists of its own, which that export's
``custom_translation_table`` then extends without reaching any other
export's.

Where torch's exporter lacks the method this relies on, exports build their
registry as torch does."""

from __future__ import annotations

import contextlib
import threading

_LOCK = threading.Lock()
_ACTIVE = 0
_TEMPLATES: dict[tuple, object] = {}
_ORIGINAL: classmethod | None = None


def _registry_class():
    try:
        from torch.onnx._internal.exporter import _registration
    except ImportError:
        return None
    found = _registration.__dict__.get("ONNXRegistry")
    method = found.__dict__.get("from_torchlib") if found is not None else None
    return found if isinstance(method, classmethod) else None


def _torchlib_sizes() -> tuple[int, int]:
    """How many functions torch's and onnxscript's torchlib hold: a function
    registered with either after a registry was kept makes a new one."""
    # Importing each torchlib's ops registers them, as building a registry
    # does: counted before, the first count would be short.
    from onnxscript.function_libs.torch_lib import ops, registration
    from torch.onnx._internal.exporter._torchlib import _torchlib_registry

    del ops

    return len(_torchlib_registry.get_torchlib_ops()), sum(
        len(entry.overloads) + len(entry.complex)
        for _, entry in registration.default_registry.items()
    )


def _copy(template):
    registry = object.__new__(type(template))
    registry.__dict__.update(template.__dict__)
    registry.functions = {target: list(decomps) for target, decomps in template.functions.items()}
    return registry


def _reusing(cls, *args, **kwargs):
    key = (cls, args, tuple(sorted(kwargs.items())), _torchlib_sizes())
    template = _TEMPLATES.get(key)
    if template is None:
        template = _TEMPLATES[key] = _ORIGINAL.__func__(cls, *args, **kwargs)
    return _copy(template)


@contextlib.contextmanager
def reused_torchlib_registry():
    """While active, torch's dynamo exporter builds its ONNX registry once
    per opset (and set of torchlib functions) and copies it after that."""
    global _ACTIVE, _ORIGINAL
    cls = _registry_class()
    if cls is None:
        yield
        return
    with _LOCK:
        if _ACTIVE == 0:
            _ORIGINAL = cls.__dict__["from_torchlib"]
            cls.from_torchlib = classmethod(_reusing)
        _ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                cls.from_torchlib = _ORIGINAL
