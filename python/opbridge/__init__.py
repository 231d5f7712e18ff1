"""opbridge: fused C++ operators from PyTorch training through ONNX to ONNX Runtime.

Each operator is defined once in C++ (spec and framework-free kernel) and runs
in PyTorch (eager, autograd, torch.compile, torch.export), exports to ONNX by
an explicit route ("standard" or "custom"), and runs in ONNX Runtime through
the library at :func:`opbridge.ort.get_library_path`.
"""

from opbridge import nn, onnx, ort
from opbridge._library import ONNX_DOMAIN, ONNX_DOMAIN_VERSION, VERSION, specs
from opbridge.ops import rms_norm, scaled_clamp
from opbridge.verify import VerificationReport, verify

__version__ = VERSION

__all__ = [
    "ONNX_DOMAIN",
    "ONNX_DOMAIN_VERSION",
    "VerificationReport",
    "__version__",
    "nn",
    "onnx",
    "ort",
    "rms_norm",
    "scaled_clamp",
    "specs",
    "verify",
]
