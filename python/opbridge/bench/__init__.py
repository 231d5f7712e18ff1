"""Benchmark: opbridge's operators, the demo model and end-to-end models
against what a user would pick instead, measured side by side in one
process on the same inputs.

Every operator comes from its card (``opbridge.ops.cards()``): inputs, call
and alternatives. ``--import MODULE`` loads a library that registers cards of
its own operators, which ``--ops`` then names as ``namespace::name``
(``--ops`` runs the operators it names only: the demo model and the
end-to-end models run with it only when ``--models`` asks).

Implementations (names are stable; they appear in ``--json`` output):

- ``torch_composite``: the operator's formula in eager PyTorch (the card's
  ``composite``).
- ``torch_builtin``: PyTorch's own operator (the card's ``builtin``:
  ``F.rms_norm``; ``torch.clamp`` in place on ``x * scale``;
  ``torch.nn.RMSNorm`` in the model).
- ``torch_compile``: inductor on the composite (compiled and warmed up before
  timing).
- ``opbridge_torch``: the card's call (``torch.ops.opbridge.*``, or the
  operator of another library).
- ``opbridge_torch_out``: the same op's out= form
  (``torch.ops.<ns>.<op>.out``) writing into outputs allocated once, as a
  caller reusing its buffers would (forward only: out= forms take no
  gradients).
- ``ort_standard``: the standard ONNX route at ORT_ENABLE_ALL (ONNX Runtime's
  own fusions apply); ``ort_standard_nofusion``: the same at ORT_DISABLE_ALL;
  ``ort_custom``: the custom route (``opbridge`` domain nodes).
- ``ort_contrib``: the standard route at opset 20 rewritten by onnxscript's
  ``optimize_for_ort`` into ONNX Runtime's fused ``com.microsoft`` operators
  where its rules match, at ORT_ENABLE_ALL; ``ort_fused``: opbridge's ``ort``
  route, which emits ONNX Runtime's fused operators itself. Their results
  carry ``fused``: ONNX Runtime's own operators in the model they ran.

End-to-end models (``--models``; :mod:`opbridge.bench.models`):
``llama_prefill``, ``llama_decode`` and ``vision``, by ``torch_composite``
(the model with every opbridge module computed by its card's composite),
``opbridge_torch``, ``torch_compile`` (of the composite model),
``opbridge_compile`` (``torch.compile`` of the model with opbridge's
operators, called as kernels), ``opbridge_compile_auto``
(:func:`opbridge.compile` with ``ops="auto"``: each operator decomposed for
inductor where the measurement on the model says the compiled model is
faster; left out at ``--quick`` sizes, and the choice is the report's
``compile_choices``) and the ONNX Runtime implementations. Their results
carry ``max_abs_diff`` (the output's largest difference from
``opbridge_torch``), and the report's ``profiles`` the share of operator
time in opbridge's operators and in matrix products (``opbridge_torch``
under ``torch.profiler``, ``ort_custom`` under ONNX Runtime's profiler).

``hf_llama`` (run only when ``--models`` names it) is a transformers
``LlamaForCausalLM`` with grouped-query attention: ``opbridge_torch`` is its
``opbridge.patch``-ed copy, ``torch_composite`` transformers' model as it is
(whose logits every output is checked against), and its ONNX models all come
from transformers' own exporter: ``ort_hf_fusions`` (transformers' model
exported with ``OnnxConfig(ort_fusions="cpu")``, ONNX Runtime's fusions: the
anchor a Hugging Face user would pick) and ``ort_hf`` (without them), and the
patched copy by opbridge's routes under ``opbridge.export.route``
(``ort_custom``, ``ort_standard``, ``ort_fused``, and OpenVINO's; the function
route and ``ort_contrib`` are left out).

Every case runs at one thread and at all threads (``torch.set_num_threads``
and ONNX Runtime's ``intra_op_num_threads``), after a warm-up that goes on
until a call compiles nothing (:func:`time_calls`: every pass compiles and
warms its ``torch.compile`` callable before any call is timed), reporting the
median and p99 of single calls. :func:`time_call` times a call of one's own
op the same way (allocator tuned, warm-up, median and p99). A memory-copy
measured in the same run gives the machine's practical bandwidth; each
result's GB/s counts the bytes the operation must move at least (inputs read
once, outputs written once).
"""

from __future__ import annotations

from opbridge.bench import models
from opbridge.bench.cases import (
    DTYPES,
    HF_IMPLS,
    HF_SETTINGS,
    IMPLS,
    MODEL_IMPLS,
    ORT_IMPLS,
    ORT_ROUTES,
    ORT_SETTINGS,
    RUNTIME_IMPLS,
    RUNTIME_SETTINGS,
    TORCH_FWD_IMPLS,
    TORCH_IMPLS,
    OpCase,
    Result,
    tensors_of,
)
from opbridge.bench.machine import (
    StillCompilingError,
    compilations,
    last_level_cache_bytes,
    machine_description,
    measure_copy_gbps,
    summarize,
    time_calls,
    tune_allocator,
    warm_up,
)
from opbridge.bench.report import markdown_table, models_markdown, plot
from opbridge.bench.runner import Settings, Timing, op_sizes, run_benchmark, time_call
from opbridge.bench.sessions import (
    export_onnx,
    fused_ops,
    impl_runner,
    impl_session,
    runtime_impls,
)

__all__ = [
    "DTYPES",
    "HF_IMPLS",
    "HF_SETTINGS",
    "IMPLS",
    "MODEL_IMPLS",
    "ORT_IMPLS",
    "ORT_ROUTES",
    "ORT_SETTINGS",
    "RUNTIME_IMPLS",
    "RUNTIME_SETTINGS",
    "TORCH_FWD_IMPLS",
    "TORCH_IMPLS",
    "OpCase",
    "Result",
    "Settings",
    "StillCompilingError",
    "Timing",
    "compilations",
    "export_onnx",
    "fused_ops",
    "impl_runner",
    "impl_session",
    "last_level_cache_bytes",
    "machine_description",
    "markdown_table",
    "measure_copy_gbps",
    "models",
    "models_markdown",
    "op_sizes",
    "plot",
    "run_benchmark",
    "runtime_impls",
    "summarize",
    "tensors_of",
    "time_call",
    "time_calls",
    "tune_allocator",
    "warm_up",
]
