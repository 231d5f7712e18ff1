"""The runtimes' implementations: each operator exported by every route and run in a session."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

from torch import nn

from opbridge import runtimes
from opbridge.bench import models as bench_models
from opbridge.bench.cases import RUNTIME_SETTINGS, export_key, export_parts, model_rewrite
from opbridge.export import export, routes
from opbridge.runtimes.base import feeds_call


def export_onnx(module: nn.Module, args: tuple, *, route: str) -> bytes:
    """Exports by ``route`` with the legacy exporter (quick), static shapes
    as a deployed model would usually have. ``route`` may name a runtime's
    rewrite of an export (:attr:`opbridge.runtimes.Runtime.rewrites`:
    ``"contrib"``, the standard route at its opset rewritten into ONNX
    Runtime's contrib operators), or be an export key (``"ort@openvino"``:
    the route, without the forms that runtime computes wrong)."""
    route, avoid = export_parts(route)
    rewrite = model_rewrite(route)
    names = [f"input_{i}" for i in range(len(args))]
    with contextlib.redirect_stdout(io.StringIO()):
        proto = export(
            module,
            args,
            route=rewrite.route if rewrite else route,
            opset=rewrite.opset if rewrite else None,
            dynamo=False,
            avoid=avoid,
            input_names=names,
            output_names=["y"],
        )
    if rewrite:
        proto, _ = rewrite.rewrite(proto)
    return proto.SerializeToString()


def fused_ops(models: dict[str, bytes]) -> dict[str, list[str]]:
    """Per runtime implementation whose model may hold ONNX Runtime's own
    operators (the ort route's, a runtime's rewrite's: ort_fused, ov_fused,
    ort_contrib): the ones it has."""
    import onnx

    fused = {}
    for impl, (_, route, _) in RUNTIME_SETTINGS.items():
        key = export_key(impl)
        if (route == "ort" or model_rewrite(route)) and key in models:
            fused[impl] = bench_models.contrib_ops(onnx.load_from_string(models[key]))
    return fused


def route_label(route: str) -> str:
    route, _, runtime = route.partition("@")
    if runtime:
        return f"{route_label(route)} for {runtimes.get(runtime).label}"
    rewrite = model_rewrite(route)
    return rewrite.label if rewrite else routes.get(route).label


def impl_session(model: bytes, impl: str, threads: int):
    """A session for runtime implementation ``impl`` (``ort_custom``, ...) at
    ``threads`` intra-op threads."""
    runtime, _, level = RUNTIME_SETTINGS[impl]
    return runtimes.get(runtime).session(model, level=level, threads=threads)


def impl_runner(session, args: tuple, impl: str) -> Callable[[], object]:
    """One call of ``impl``'s session on the torch tensors ``args``: its
    runtime's ``bench_call``, else :func:`opbridge.runtimes.base.feeds_call`."""
    runtime = runtimes.get(RUNTIME_SETTINGS[impl][0])
    return (runtime.bench_call or feeds_call)(session, args)


def runtime_impls(
    models: dict[str, bytes], want: set[str], threads: int, args: tuple, log, label: str
) -> dict[str, Callable[[], object]]:
    """The wanted runtime implementations whose route exported, each a
    no-argument call on the tensors ``args``."""
    fns = {}
    for impl in RUNTIME_SETTINGS:
        key = export_key(impl)
        if impl in want and key in models:
            try:
                fns[impl] = impl_runner(impl_session(models[key], impl, threads), args, impl)
            except Exception as error:
                log(f"  {label} {impl}: no session ({error})")
    return fns
