"""opbridge: fused C++ operators from PyTorch training through ONNX to every runtime.

Each operator is defined once in C++ (spec and framework-free kernel) and runs
in PyTorch (eager, autograd, torch.compile, torch.export), exports to ONNX by
an explicit route (:mod:`opbridge.export`), and runs in the runtimes of
:mod:`opbridge.runtimes` (ONNX Runtime: :mod:`opbridge.runtimes.onnxruntime`).

The package is layered, each layer importing only the ones below it (checked
by ``./dev lint``): ``cli``; ``bench``; ``demo``; ``deploy`` and
``integrations``; ``autoroute`` and ``compiling``; ``verify`` and ``patching``; ``sdk``;
``export`` and ``runtimes``; ``nn``; ``ops``; the libraries (``_library``,
``_stable``); ``_schema``, ``_dtypes`` and ``_imports``.

Importing opbridge does five things beyond defining its modules, and
nothing else (this list is the one place that says so; a test holds it):

1. It loads opbridge's own operator library (``opbridge._C`` and its
   ``libopbridge_torch*.so``), which registers the operators with PyTorch
   (``torch.ops.opbridge.*``), as any extension does
   (:mod:`opbridge._library`).
2. It makes ``route="auto"`` of :func:`opbridge.export.export` mean
   :func:`opbridge.autoroute.choose`'s plan (:mod:`opbridge.autoroute`,
   which sits above export, registers its resolver).
3. It registers the operators' DTensor sharding strategies
   (:mod:`opbridge.ops.sharding`): at once if ``torch.distributed.tensor`` is
   imported, else through one import finder that waits for that
   import and removes itself when it comes (opbridge does not import
   ``torch.distributed.tensor`` itself).
4. It registers every loaded library's operators with PyTorch's own ONNX
   exporters, and every library loaded later (:mod:`opbridge.export.doors`):
   a symbolic per operator with ``torch.onnx.register_custom_op_symbolic``
   for ``dynamo=False``, and a translation per operator in the dynamo
   exporter's default table, so that a plain ``torch.onnx.export`` of a model
   with these operators works. The table is filled at once if the dynamo
   exporter is imported, else through one import finder that waits for its
   import (the first export's) and removes itself when it comes: opbridge
   does not import the exporter (onnxscript, onnx_ir) itself.
5. It hands every loaded library's OpenVINO extension, and that of every
   library loaded later, to transformers' ``OpenVINOExporter``
   (:func:`opbridge.runtimes.openvino.install_transformers_door`): at once
   if ``transformers.exporters.exporter_openvino`` is imported, else through
   one import finder that waits for that import and removes itself when it
   comes (opbridge does not import transformers itself).

Runtime packages (ONNX Runtime, OpenVINO, ExecuTorch) and the SDK's test
helpers are imported on first use.
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
from opbridge.ops import catalog as _catalog
from opbridge.ops.catalog import *  # noqa: F403 (every operator's call)
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
    "autoroute",
    "cmake_prefix_path",
    "compile",
    "export",
    "libraries",
    "load_library",
    "nn",
    "patch",
    "patching",
    "runtimes",
    "sdk",
    "specs",
    "unpatch",
    "verify",
]
__all__ += _catalog.__all__
