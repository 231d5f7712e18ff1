"""ONNX Runtime with the opbridge custom-op library registered."""

from __future__ import annotations

import os
import re
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
    added. A ``ModelProto`` is accepted too. A model ONNX Runtime cannot
    read (a truncated file, an IR version newer than the runtime's, an
    ``opbridge`` domain version this library lacks) gets an error that says
    what to change.
    """
    import onnxruntime

    if hasattr(path_or_bytes, "SerializeToString"):
        path_or_bytes = path_or_bytes.SerializeToString()
    elif isinstance(path_or_bytes, os.PathLike):
        path_or_bytes = os.fspath(path_or_bytes)
    check_domain_version(path_or_bytes)
    kwargs["sess_options"] = session_options(kwargs.get("sess_options"))
    kwargs.setdefault("providers", ["CPUExecutionProvider"])
    try:
        return onnxruntime.InferenceSession(path_or_bytes, **kwargs)
    except Exception as error:
        explained = _explain_load_error(error, path_or_bytes)
        if explained is None:
            raise
        raise explained from error


_IR_VERSION_ERROR = re.compile(
    r"Unsupported model IR version: (\d+), max supported IR version: (\d+)"
)


def _explain_load_error(error: Exception, model: Any) -> Exception | None:
    """An opbridge error for a load failure whose ONNX Runtime message does
    not say what to do; None for the others."""
    import onnx
    import onnxruntime

    match = _IR_VERSION_ERROR.search(str(error))
    if match:
        ir_version, supported = int(match.group(1)), int(match.group(2))
        source = f"model {model}" if isinstance(model, str) else "the model"
        return RuntimeError(
            f"opbridge: {source} has ONNX IR version {ir_version}, but onnxruntime "
            f"{onnxruntime.__version__} reads up to IR version {supported}. Set "
            f"model.ir_version = {supported} before saving it (or pass "
            f"ir_version={supported} to onnx.helper.make_model, which writes IR version "
            f"{onnx.IR_VERSION} with onnx {onnx.__version__}); that is valid when the model uses "
            "no feature of a newer IR version. Models from opbridge.onnx.export already have a "
            "version ONNX Runtime reads."
        )
    return None


def load_model(model: Any):
    """The ``onnx.ModelProto`` of a path, bytes or ``ModelProto`` (external
    data is not loaded). A file or bytes that do not parse as an ONNX model
    (e.g. a truncated file) give a ValueError naming the path and its size."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        try:
            return onnx.load(path, load_external_data=False)
        except DecodeError as error:
            size = os.path.getsize(path)
            raise ValueError(
                f"opbridge: {path} ({size} bytes) is not a readable ONNX model: {error} "
                "(a truncated or partly written file, or not an .onnx file)"
            ) from error
    if isinstance(model, bytes | bytearray):
        try:
            return onnx.load_from_string(bytes(model))
        except DecodeError as error:
            raise ValueError(
                f"opbridge: the {len(model)} bytes given are not a readable ONNX model: {error} "
                "(truncated, or not a serialized ModelProto)"
            ) from error
    return model


def check_domain_version(model: Any) -> None:
    """Raises if the model imports an ``opbridge`` domain version this library
    does not have (newer, or below 1).

    ONNX Runtime itself would only say the op "is not a registered
    function/op"; this names both versions. ``model`` is a path, bytes or a
    ``ModelProto``.
    """
    proto = load_model(model)
    for opset in proto.opset_import:
        if opset.domain != ONNX_DOMAIN:
            continue
        if opset.version > ONNX_DOMAIN_VERSION:
            raise RuntimeError(
                f"opbridge: the model needs ONNX domain '{ONNX_DOMAIN}' version {opset.version}, "
                f"but this library (opbridge {VERSION}, {get_library_path()}) supports "
                f"version {ONNX_DOMAIN_VERSION}; upgrade opbridge"
            )
        if opset.version < 1:
            raise RuntimeError(
                f"opbridge: the model imports ONNX domain '{ONNX_DOMAIN}' version "
                f"{opset.version}, but the domain's versions start at 1 (this library, opbridge "
                f"{VERSION}, has versions 1 to {ONNX_DOMAIN_VERSION}); set that opset import's "
                f"version to {ONNX_DOMAIN_VERSION}"
            )
