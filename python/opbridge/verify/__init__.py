"""Proves that a model computes the same numbers in PyTorch and ONNX Runtime.

:func:`verify` exports a model by the route the caller names (or takes an
ONNX model as given), checks its structure against the opbridge specs, and
compares ONNX Runtime with PyTorch:

* the final outputs, element by element: ``|ort - torch| <= atol + rtol * |torch|``;
* layer by layer: the output of every named submodule (a forward hook in
  PyTorch) against the value the exporter produced for that module (the
  output of the last node in the module's scope, exposed as an extra graph
  output), so the first module whose output diverges is named;
* operator by operator: every call of a library operator the model makes
  (``torch.ops.<namespace>.<op>`` of any loaded library, functional calls
  included) against the value of that call's node in the graph (the library
  node, or on the standard route the call's decomposition, found by the
  exporter's node metadata), so the first call that diverges is named with
  the module that made it (``report.first_divergence_op``);
* kernel or body: on the ``function`` route (a library node with a
  model-local function, its fallback body), whether the runtime ran the
  loaded library's kernel for each such node, by the runtime's own
  profiling in one extra run of the example (``report.kernels``); a node
  that ran its body instead fails the report;
* sweeps that expose silent failures: every ONNX Runtime graph optimization
  level (a level whose results differ from ``disable_all`` is a fusion
  problem), batch sizes 1, the export batch and a large one, sequence lengths
  (``dynamic_sequence=True``), and several input draws (random, or the
  caller's own);
* with ``reference=`` (the model before ``opbridge.patch``): the patched
  PyTorch model and ONNX Runtime each against the reference on every case,
  which side diverges (the torch patching or the export/runtime), and
  same-named modules of the two PyTorch models layer by layer.

What the report calls dynamic (batch, sequence) is read from the exported
graph's inputs, whatever the export asked for.

The result is a :class:`VerificationReport`: ``report.passed``,
``report.first_divergence``, a terminal table (``str(report)``), JSON
(``report.to_json()``) and a per-layer error plot (``report.plot(path)``).

Modules by concern: :mod:`~opbridge.verify.core` (the run),
:mod:`~opbridge.verify.report`, :mod:`~opbridge.verify.comparison`,
:mod:`~opbridge.verify.reference` (against a reference model),
:mod:`~opbridge.verify.structure`, :mod:`~opbridge.verify.layers`,
:mod:`~opbridge.verify.operators`,
:mod:`~opbridge.verify.sweeps`, :mod:`~opbridge.verify.formatting` and
:mod:`~opbridge.cli.verify` (``opbridge verify``).
"""

from opbridge.verify.comparison import (
    DEFAULT_TOLERANCE,
    DEFAULT_TOLERANCE_FLOAT64,
    Comparison,
    Stats,
    compare,
)
from opbridge.verify.core import SessionFactory, default_session_factory, dynamic_spec, verify
from opbridge.verify.layers import map_modules
from opbridge.verify.operators import map_calls
from opbridge.verify.options import Sweep, VerifyOptions
from opbridge.verify.report import (
    BODY,
    FAIL,
    IN_ACCUMULATION,
    IN_BOTH,
    IN_EXPORT,
    IN_PATCHING,
    KERNEL,
    NOT_APPLICABLE,
    ONNX_VS_REFERENCE,
    ONNX_VS_TORCH,
    PASS,
    TORCH_VS_REFERENCE,
    UNKNOWN,
    WARN,
    Agreement,
    Cell,
    Check,
    KernelRun,
    LayerResult,
    OperatorResult,
    ReferenceLayer,
    ReferenceRun,
    VerificationReport,
)
from opbridge.verify.sweeps import LARGE_BATCH_MIN, load_inputs

__all__ = [
    "BODY",
    "DEFAULT_TOLERANCE",
    "DEFAULT_TOLERANCE_FLOAT64",
    "FAIL",
    "IN_ACCUMULATION",
    "IN_BOTH",
    "IN_EXPORT",
    "IN_PATCHING",
    "KERNEL",
    "LARGE_BATCH_MIN",
    "NOT_APPLICABLE",
    "ONNX_VS_REFERENCE",
    "ONNX_VS_TORCH",
    "PASS",
    "TORCH_VS_REFERENCE",
    "UNKNOWN",
    "WARN",
    "Agreement",
    "Cell",
    "Check",
    "Comparison",
    "KernelRun",
    "LayerResult",
    "OperatorResult",
    "ReferenceLayer",
    "ReferenceRun",
    "SessionFactory",
    "Stats",
    "Sweep",
    "VerificationReport",
    "VerifyOptions",
    "compare",
    "default_session_factory",
    "dynamic_spec",
    "load_inputs",
    "map_calls",
    "map_modules",
    "verify",
]
