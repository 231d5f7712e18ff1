"""Bind inputs and preallocated outputs to an ONNX Runtime session once, then
run repeatedly without copies (ONNX Runtime's IO binding).

    session = opbridge.runtimes.onnxruntime.InferenceSession("model.onnx")
    bound = opbridge.runtimes.onnxruntime.bind(session, {"x": x})  # numpy array or torch tensor
    y = bound.run()["y"]                                # the same output buffer every run
    x.copy_(next_x); bound.run()                        # new data, no rebinding

Inputs are bound zero-copy when they are C-contiguous CPU arrays (numpy) or
tensors (torch) of an element type ONNX Runtime has: the session reads their
memory on every run, so filling them in place is how a caller feeds new
data. Anything else (non-contiguous, on another device) is refused, naming
the input. Outputs are preallocated (``outputs`` given by the caller, or
allocated here as torch tensors when ``torch`` inputs were given, numpy
arrays otherwise) with the shapes one ordinary run of the bound inputs
produces, and written in place by every run. Rebind (call :func:`bind`
again) when the input shapes change.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr")


def _numpy_dtype(value: Any) -> np.dtype:
    if _is_torch(value):
        import torch

        if value.dtype == torch.bfloat16:
            raise TypeError("bfloat16 tensors have no numpy element type to bind with")
        return np.dtype(torch.empty(0, dtype=value.dtype).numpy().dtype)
    return value.dtype


def _check(kind: str, name: str, value: Any) -> None:
    if _is_torch(value):
        if value.device.type != "cpu":
            raise ValueError(
                f"opbridge.runtimes.onnxruntime.bind: {kind} {name!r} is on {value.device}; bind "
                "CPU tensors"
            )
        if not value.is_contiguous():
            raise ValueError(
                f"opbridge.runtimes.onnxruntime.bind: {kind} {name!r} is not contiguous (strides "
                f"{tuple(value.stride())}); pass .contiguous()"
            )
        return
    if not isinstance(value, np.ndarray):
        raise TypeError(
            f"opbridge.runtimes.onnxruntime.bind: {kind} {name!r} must be a numpy array or a "
            "torch tensor, got "
            f"{type(value).__name__}"
        )
    if not value.flags["C_CONTIGUOUS"]:
        raise ValueError(
            f"opbridge.runtimes.onnxruntime.bind: {kind} {name!r} is not C-contiguous; "
            "pass np.ascontiguousarray(...)"
        )


def _pointer(value: Any) -> int:
    return value.data_ptr() if _is_torch(value) else value.ctypes.data


class BoundSession:
    """A session with its inputs and outputs bound: :meth:`run` runs it."""

    def __init__(self, session: Any, inputs: dict[str, Any], outputs: dict[str, Any]):
        self.session = session
        self.inputs = inputs
        self.outputs = outputs
        self.binding = session.io_binding()
        for name, value in inputs.items():
            self._bind(self.binding.bind_input, name, value)
        for name, value in outputs.items():
            self._bind(self.binding.bind_output, name, value)

    @staticmethod
    def _bind(method, name: str, value: Any) -> None:
        method(name, "cpu", 0, _numpy_dtype(value), list(value.shape), _pointer(value))

    def run(self) -> dict[str, Any]:
        """Runs the session on the bound inputs' current contents; returns the
        bound output buffers (the same objects every call)."""
        self.session.run_with_iobinding(self.binding)
        return self.outputs


def bind(session: Any, inputs: dict[str, Any], outputs: dict[str, Any] | None = None):
    """Binds ``inputs`` (every input of ``session``, by name) and ``outputs``
    (by name; default: every output, preallocated here) for repeated runs."""
    expected = [i.name for i in session.get_inputs()]
    missing = [n for n in expected if n not in inputs]
    unknown = [n for n in inputs if n not in expected]
    if missing or unknown:
        raise ValueError(
            f"opbridge.runtimes.onnxruntime.bind: the session takes inputs {expected}; missing "
            f"{missing}, "
            f"unknown {unknown}"
        )
    for name, value in inputs.items():
        _check("input", name, value)
    output_names = [o.name for o in session.get_outputs()]
    if outputs is None:
        feeds = {
            n: (v.numpy() if _is_torch(v) else v) for n, v in inputs.items()
        }  # a zero-copy view: one run tells the output shapes and types
        results = session.run(output_names, feeds)
        use_torch = any(_is_torch(v) for v in inputs.values())
        outputs = {}
        for name, result in zip(output_names, results, strict=True):
            if use_torch:
                import torch

                outputs[name] = torch.from_numpy(np.empty_like(result))
            else:
                outputs[name] = np.empty_like(result)
    else:
        unknown = [n for n in outputs if n not in output_names]
        if unknown:
            raise ValueError(
                f"opbridge.runtimes.onnxruntime.bind: the session has outputs {output_names}; "
                f"unknown {unknown}"
            )
        for name, value in outputs.items():
            _check("output", name, value)
    return BoundSession(session, dict(inputs), outputs)
