"""Loads the native extension, which registers torch.ops.opbridge.*."""

from __future__ import annotations

from pathlib import Path

import torch

_PACKAGE_DIR = Path(__file__).resolve().parent


def _load():
    try:
        from opbridge import _C
    except ImportError as error:
        candidates = sorted(str(p) for p in _PACKAGE_DIR.glob("_C*.so"))
        raise ImportError(
            "opbridge: could not load the native extension opbridge._C "
            f"(looked in {_PACKAGE_DIR}, found {candidates or 'no _C*.so'}): {error}. "
            "Rebuild it with `pip install --no-build-isolation -e .` against "
            f"torch {torch.__version__}."
        ) from error
    return _C


_C = _load()

VERSION: str = _C.__version__
ONNX_DOMAIN: str = _C.ONNX_DOMAIN
ONNX_DOMAIN_VERSION: int = _C.ONNX_DOMAIN_VERSION


def specs() -> dict[str, dict]:
    """Every operator's spec (from the C++ definition), keyed by op name."""
    return {spec["name"]: spec for spec in _C.specs()}


def native_dir() -> Path:
    """The folder holding _C and libopbridge_ort.so."""
    return Path(_C.__file__).resolve().parent
