"""opbridge: fused C++ operators from PyTorch training through ONNX to every runtime.

Each operator is defined once in C++ (spec and framework-free kernel) and runs
in PyTorch (eager, autograd, torch.compile, torch.export), exports to ONNX by
an explicit route (:mod:`opbridge.export`), and runs in the runtimes of
:mod:`opbridge.runtimes` (ONNX Runtime: :mod:`opbridge.ort`).

The package is layered, each layer importing only the ones below it (checked
by ``./dev lint``): ``cli``; ``bench``; ``demo``; ``deploy`` and
``integrations``; ``autoroute`` and ``compiling``; ``verify`` and ``patching``; ``sdk``;
``export`` and ``runtimes``; ``nn``; ``ops``; the libraries (``_library``).
"""

from opbridge import _aliases

_aliases.install()

from opbridge import autoroute, export, nn, patching, runtimes  # noqa: E402
from opbridge._library import (  # noqa: E402
    ONNX_DOMAIN,
    ONNX_DOMAIN_VERSION,
    VERSION,
    Library,
    cmake_prefix_path,
    libraries,
    load_library,
    specs,
)
from opbridge.compiling import compile  # noqa: E402
from opbridge.export import ExportOptions  # noqa: E402
from opbridge.ops import (  # noqa: E402
    add_layer_norm,
    add_rms_norm,
    bias_gelu,
    layer_norm,
    normalize_image,
    rms_norm,
    rotary_embedding,
    scaled_clamp,
)
from opbridge.patching import patch, unpatch  # noqa: E402
from opbridge.sdk import build  # noqa: E402
from opbridge.verify import VerificationReport, VerifyOptions, verify  # noqa: E402

# The names the documentation uses: opbridge.onnx (export) and opbridge.ort (ONNX Runtime).
onnx = export
ort = runtimes.onnxruntime

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
    "build",
    "cmake_prefix_path",
    "compile",
    "export",
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
    "runtimes",
    "scaled_clamp",
    "specs",
    "unpatch",
    "verify",
]


def __getattr__(name: str):
    """The modules kept under their former names (``opbridge.openvino``,
    ``opbridge.testing``, ...) as attributes, imported on first use: OpenVINO
    and the SDK's test helpers cost nothing until a program reaches for them."""
    moved = _aliases.MOVED.get(f"{__name__}.{name}")
    if moved is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return importlib.import_module(f"{__name__}.{name}")
