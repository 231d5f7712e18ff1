"""ONNX Runtime with the opbridge custom-op library registered."""

from __future__ import annotations

import os
from typing import Any

from opbridge._library import native_dir

LIBRARY_NAME = "libopbridge_ort.so"


def get_library_path() -> str:
    """Absolute path of the ONNX Runtime custom-op library (domain ``opbridge``)."""
    path = native_dir() / LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"opbridge: the ONNX Runtime library {path} is missing; reinstall opbridge"
        )
    return str(path)


def session_options(options: Any = None):
    """``onnxruntime.SessionOptions`` (a new one, or ``options``) with the library registered."""
    import onnxruntime

    options = options if options is not None else onnxruntime.SessionOptions()
    path = get_library_path()
    try:
        options.register_custom_ops_library(path)
    except Exception as error:
        raise RuntimeError(
            f"opbridge: ONNX Runtime {onnxruntime.__version__} could not load {path}: {error}"
        ) from error
    return options


def InferenceSession(path_or_bytes: str | bytes | os.PathLike, **kwargs: Any):
    """An ``onnxruntime.InferenceSession`` with the opbridge library registered.

    Takes the same arguments; ``sess_options`` (if given) gets the library
    added. A ``ModelProto`` is accepted too.
    """
    import onnxruntime

    if hasattr(path_or_bytes, "SerializeToString"):
        path_or_bytes = path_or_bytes.SerializeToString()
    elif isinstance(path_or_bytes, os.PathLike):
        path_or_bytes = os.fspath(path_or_bytes)
    kwargs["sess_options"] = session_options(kwargs.get("sess_options"))
    kwargs.setdefault("providers", ["CPUExecutionProvider"])
    return onnxruntime.InferenceSession(path_or_bytes, **kwargs)
