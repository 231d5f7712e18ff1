"""ONNX Runtime with the opbridge custom-op library registered."""

from __future__ import annotations

import os
from typing import Any

from opbridge._library import ONNX_DOMAIN, ONNX_DOMAIN_VERSION, VERSION, native_dir

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
    check_domain_version(path_or_bytes)
    kwargs["sess_options"] = session_options(kwargs.get("sess_options"))
    kwargs.setdefault("providers", ["CPUExecutionProvider"])
    return onnxruntime.InferenceSession(path_or_bytes, **kwargs)


def check_domain_version(model: Any) -> None:
    """Raises if the model needs a newer ``opbridge`` domain than this library has.

    ONNX Runtime itself would only say the op "is not a registered
    function/op"; this names both versions. ``model`` is a path, bytes or a
    ``ModelProto``.
    """
    import onnx

    if isinstance(model, str | os.PathLike):
        proto = onnx.load(os.fspath(model), load_external_data=False)
    elif isinstance(model, bytes | bytearray):
        proto = onnx.load_from_string(bytes(model))
    else:
        proto = model
    for opset in proto.opset_import:
        if opset.domain == ONNX_DOMAIN and opset.version > ONNX_DOMAIN_VERSION:
            raise RuntimeError(
                f"opbridge: the model needs ONNX domain '{ONNX_DOMAIN}' version {opset.version}, "
                f"but this library (opbridge {VERSION}, {get_library_path()}) supports "
                f"version {ONNX_DOMAIN_VERSION}; upgrade opbridge"
            )
