"""The runtimes' implementations: each operator exported by every route and run in a session."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

from torch import nn

from opbridge import runtimes
from opbridge.bench import models as bench_models
from opbridge.bench.cases import (
    HF_IMPLS,
    RUNTIME_SETTINGS,
    export_key,
    export_parts,
    model_rewrite,
)
from opbridge.export import export, routes


def export_onnx(module: nn.Module, args: tuple, *, route: str) -> bytes:
    """Exports by ``route`` with the legacy exporter (quick), static shapes
    as a deployed model would usually have. ``route`` may name a runtime's
    rewrite of an export (:attr:`opbridge.runtimes.BenchHooks.rewrites`:
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
    ort_contrib; transformers' own exports, under their implementation's
    name: ort_hf_fusions, ort_hf): the ones it has."""
    import onnx

    fused = {}
    for impl, (_, route, _) in RUNTIME_SETTINGS.items():
        key = export_key(impl)
        if key in models and (model_rewrite(route) or routes.get(route).runtime_ops):
            fused[impl] = bench_models.contrib_ops(onnx.load_from_string(models[key]))
    for impl in HF_IMPLS:
        if impl in models:
            fused[impl] = bench_models.contrib_ops(onnx.load_from_string(models[impl]))
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


def by_input_names(session, inputs: dict) -> tuple:
    """The tensors of ``inputs`` (by name) in the order of the session's inputs."""
    names = [meta.name for meta in session.get_inputs()]
    missing = [name for name in names if name not in inputs]
    if missing:
        raise ValueError(f"the model takes inputs {missing} the case lacks (it has {list(inputs)})")
    return tuple(inputs[name] for name in names)


def session_call(runtime: str, session, args: tuple | dict) -> Callable[[], object]:
    """One call of ``runtime``'s session on torch tensors: ``args`` in order,
    or a dict of them by the session's input names; the runtime's
    :attr:`~opbridge.runtimes.BenchHooks.call`."""
    if isinstance(args, dict):
        args = by_input_names(session, args)
    return runtimes.get(runtime).bench.call(session, args)


def impl_runner(session, args: tuple | dict, impl: str) -> Callable[[], object]:
    """One call of ``impl``'s session on the torch tensors ``args`` (in
    order, or by input name), as :func:`session_call` makes it."""
    return session_call(RUNTIME_SETTINGS[impl][0], session, args)


def runtime_impls(
    models: dict[str, bytes], want: set[str], threads: int, args: tuple | dict, log, label: str
) -> dict[str, Callable[[], object]]:
    """The wanted runtime implementations whose route exported, each a
    no-argument call on the tensors ``args`` (in order, or by input name)."""
    fns = {}
    for impl in RUNTIME_SETTINGS:
        key = export_key(impl)
        if impl in want and key in models:
            try:
                fns[impl] = impl_runner(impl_session(models[key], impl, threads), args, impl)
            except Exception as error:
                log(f"  {label} {impl}: no session ({error})")
    return fns


def hf_impls(
    models: dict[str, bytes], want: set[str], threads: int, inputs: dict, log, label: str
) -> dict[str, Callable[[], object]]:
    """The wanted implementations of transformers' own exports (HF_IMPLS,
    in ``models`` under their names) that exported, each a no-argument call
    on ``inputs`` by input name, in ONNX Runtime at its default level."""
    runtime = runtimes.get(runtimes.DEFAULT)
    level = runtime.default_level
    fns = {}
    for impl in HF_IMPLS:
        if impl in want and impl in models:
            try:
                session = runtime.session(models[impl], level=level, threads=threads)
                fns[impl] = session_call(runtime.name, session, inputs)
            except Exception as error:
                log(f"  {label} {impl}: no session ({error})")
    return fns
