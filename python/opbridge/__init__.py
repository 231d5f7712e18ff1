"""opbridge: fused C++ operators from PyTorch training through ONNX to every runtime.

Each operator is defined once in C++ (spec and framework-free kernel) and runs
in PyTorch (eager, autograd, torch.compile, torch.export), exports to ONNX by
an explicit route (:mod:`opbridge.export`), and runs in the runtimes of
:mod:`opbridge.runtimes` (ONNX Runtime: :mod:`opbridge.runtimes.onnxruntime`).

The package is layered, each layer importing only the ones below it (checked
by ``./dev lint``): ``cli``; ``bench``; ``demo``; ``deploy`` and
``integrations``; ``autoroute`` and ``compiling``; ``verify`` and ``patching``; ``sdk``;
``export`` and ``runtimes``; ``nn``; ``ops``; the libraries (``_library``).
"""

from opbridge import autoroute, export, nn, patching, runtimes, sdk
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
from opbridge.compiling import compile
from opbridge.export import ExportOptions
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
from opbridge.verify import VerificationReport, VerifyOptions, verify

__version__ = VERSION

__all__ = [
    "ONNX_DOMAIN",
    "ONNX_DOMAIN_VERSION",
    "ExportOptions",
    "Library",
    "VerificationReport",
    "VerifyOptions",
    "__version__",
    "add_layer_norm",
    "add_rms_norm",
    "autoroute",
    "bias_gelu",
    "cmake_prefix_path",
    "compile",
    "export",
    "layer_norm",
    "libraries",
    "load_library",
    "nn",
    "normalize_image",
    "patch",
    "patching",
    "rms_norm",
    "rotary_embedding",
    "runtimes",
    "scaled_clamp",
    "sdk",
    "specs",
    "unpatch",
    "verify",
]
