"""The runtimes' implementations: each operator exported by every route and run in a session."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

import torch
from torch import nn

from opbridge import runtimes
from opbridge.bench import models as bench_models
from opbridge.bench.cases import RUNTIME_SETTINGS, export_key, export_parts
from opbridge.export import export, routes

# ---------------------------------------------------------------- ONNX Runtime


def export_onnx(module: nn.Module, args: tuple, *, route: str) -> bytes:
    """Exports by ``route`` with the legacy exporter (quick), static shapes
    as a deployed model would usually have. ``route="contrib"``: the
    standard route at ``bench_models.CONTRIB_OPSET``, rewritten into ONNX
    Runtime's contrib operators. ``route`` may be an export key
    (``"ort@openvino"``: the route, without the forms that runtime
    computes wrong)."""
    route, avoid = export_parts(route)
    names = [f"input_{i}" for i in range(len(args))]
    opset = bench_models.CONTRIB_OPSET if route == "contrib" else None
    with contextlib.redirect_stdout(io.StringIO()):
        proto = export(
            module,
            args,
            route="standard" if route == "contrib" else route,
            opset=opset,
            dynamo=False,
            avoid=avoid,
            input_names=names,
            output_names=["y"],
        )
    if route == "contrib":
        proto, _ = bench_models.ort_contrib(proto)
    return proto.SerializeToString()


def fused_ops(models: dict[str, bytes]) -> dict[str, list[str]]:
    """Per ONNX Runtime implementation whose route emits ONNX Runtime's own
    operators (ort_contrib, ort_fused): the ones its exported model has."""
    import onnx

    fused = {}
    for impl, (_, route, _) in RUNTIME_SETTINGS.items():
        key = export_key(impl)
        if route in ("contrib", "ort") and key in models:
            fused[impl] = bench_models.contrib_ops(onnx.load_from_string(models[key]))
    return fused


def route_label(route: str) -> str:
    route, _, runtime = route.partition("@")
    if runtime:
        return f"{route_label(route)} for {runtimes.get(runtime).label}"
    if route == "contrib":
        return f"standard route (opset {bench_models.CONTRIB_OPSET}, for ort_contrib)"
    return routes.get(route).label


def ort_session(model: bytes, impl: str, threads: int):
    """A session for runtime implementation ``impl`` (``ort_custom``, ...) at
    ``threads`` intra-op threads."""
    runtime, _, level = RUNTIME_SETTINGS[impl]
    return runtimes.get(runtime).session(model, level=level, threads=threads)


def ort_runner(session, args: tuple) -> Callable[[], object]:
    """One call of the session on args. NumPy has no bfloat16, so such
    inputs go in through IO binding, as OrtValues over their bits, bound
    once; ONNX Runtime allocates the outputs on every call, as run() does."""
    names = [meta.name for meta in session.get_inputs()]
    if any(a.dtype == torch.bfloat16 for a in args) and hasattr(session, "io_binding"):
        import onnxruntime
        from onnx import TensorProto

        binding = session.io_binding()
        values = []  # the bound OrtValues (and the memory they view) live as long as the call
        for name, a in zip(names, args, strict=True):
            a = a.detach().contiguous()
            if a.dtype == torch.bfloat16:
                bits = a.view(torch.int16).numpy().view("uint16")
                value = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(
                    bits, TensorProto.BFLOAT16
                )
            else:
                value = onnxruntime.OrtValue.ortvalue_from_numpy(a.numpy())
            binding.bind_ortvalue_input(name, value)
            values.append(value)
        for meta in session.get_outputs():
            binding.bind_output(meta.name, "cpu")
        return lambda: (session.run_with_iobinding(binding), values)[0]
    feed = {name: a.detach().numpy() for name, a in zip(names, args, strict=True)}
    return lambda: session.run(None, feed)


def ort_impls(
    models: dict[str, bytes], want: set[str], threads: int, args: tuple, log, label: str
) -> dict[str, Callable[[], object]]:
    """The wanted ONNX Runtime implementations whose route exported, each a
    no-argument call on the tensors ``args``."""
    fns = {}
    for impl in RUNTIME_SETTINGS:
        key = export_key(impl)
        if impl in want and key in models:
            try:
                fns[impl] = ort_runner(ort_session(models[key], impl, threads), args)
            except Exception as error:
                log(f"  {label} {impl}: no session ({error})")
    return fns
