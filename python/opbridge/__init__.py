"""opbridge: fused C++ operators from PyTorch training through ONNX to ONNX Runtime.

Each operator is defined once in C++ (spec and framework-free kernel) and runs
in PyTorch (eager, autograd, torch.compile, torch.export), exports to ONNX by
an explicit route ("standard" or "custom"), and runs in ONNX Runtime through
the library at :func:`opbridge.ort.get_library_path`.
"""

from opbridge import build, nn, onnx, ort, patching
from opbridge._library import (
    ONNX_DOMAIN,
    ONNX_DOMAIN_VERSION,
    VERSION,
    Library,
    cmake_prefix_path,
    libraries,
    load_library,
    specs,
)
from opbridge.ops import (
    add_layer_norm,
    add_rms_norm,
    bias_gelu,
    layer_norm,
    normalize_image,
    rms_norm,
    rotary_embedding,
    scaled_clamp,
)
from opbridge.patching import patch, unpatch
from opbridge.verify import VerificationReport, verify

__version__ = VERSION

__all__ = [
    "ONNX_DOMAIN",
    "ONNX_DOMAIN_VERSION",
    "Library",
    "VerificationReport",
    "__version__",
    "add_layer_norm",
    "add_rms_norm",
    "bias_gelu",
    "build",
    "cmake_prefix_path",
    "layer_norm",
    "libraries",
    "load_library",
    "nn",
    "normalize_image",
    "onnx",
    "ort",
    "patch",
    "patching",
    "rms_norm",
    "rotary_embedding",
    "scaled_clamp",
    "specs",
    "unpatch",
    "verify",
]
