"""The benchmark's implementations, results and operator cases (from the cards)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn

import opbridge
from opbridge import _dtypes, runtimes
from opbridge._library import library_for_namespace
from opbridge.export import routes

TORCH_IMPLS = ("torch_composite", "torch_builtin", "torch_compile", "opbridge_torch")
# PyTorch implementations timed forward only.
TORCH_FWD_IMPLS = ("opbridge_torch_out",)
# PyTorch implementations of the end-to-end models only: torch.compile of the
# model with opbridge's operators, as kernels (opbridge_compile) and with the
# operators opbridge.compile's measurement decomposes (opbridge_compile_auto).
MODEL_IMPLS = ("opbridge_compile", "opbridge_compile_auto")


# The runtime implementations timed: each route's model at the runtime's
# default level ("<runtime>_<route's bench name>": ort_custom, ort_standard,
# ort_fused for the ort route), a route with bench_base_level (the standard
# route) also at the base level ("_nofusion", for a runtime with more than
# one level), and each of the
# runtime's own rewrites of an export (Runtime.bench.rewrites: ONNX Runtime's
# "contrib", the standard route rewritten into its contrib operators, is
# ort_contrib). Name -> (route or rewrite, level).
def runtime_settings(runtime: runtimes.Runtime) -> dict[str, tuple[str, str]]:
    settings = {}
    for route in routes.routes().values():
        settings[f"{runtime.short}_{route.bench_name}"] = (route.name, runtime.default_level)
        if route.bench_base_level and runtime.base_level != runtime.default_level:
            nofusion = f"{runtime.short}_{route.bench_name}_nofusion"
            settings[nofusion] = (route.name, runtime.base_level)
    for name in runtime.bench.rewrites:
        settings[f"{runtime.short}_{name}"] = (name, runtime.default_level)
    return settings


def model_rewrite(name: str) -> runtimes.ModelRewrite | None:
    """The registered runtimes' rewrite of an export called ``name``, if any."""
    for runtime in map(runtimes.get, runtimes.names()):
        if name in runtime.bench.rewrites:
            return runtime.bench.rewrites[name]
    return None


# Every runtime's implementations: name -> (runtime, route, level).
RUNTIME_SETTINGS = {
    impl: (name, route, level)
    for name in runtimes.names()
    for impl, (route, level) in runtime_settings(runtimes.get(name)).items()
}
RUNTIME_IMPLS = tuple(RUNTIME_SETTINGS)


def export_key(impl: str) -> str:
    """Which exported model a runtime implementation runs: its route's
    (``"custom"``, ...), or ``"<route>@<runtime>"`` for a runtime with forms
    it computes wrong (:attr:`opbridge.runtimes.Runtime.wrong_forms`), whose
    model is exported without them."""
    runtime, route, _ = RUNTIME_SETTINGS[impl]
    return f"{route}@{runtime}" if runtimes.get(runtime).wrong_forms else route


def export_parts(key: str) -> tuple[str, frozenset[str]]:
    """The route and the operators to avoid of an :func:`export_key`."""
    route, _, runtime = key.partition("@")
    return route, runtimes.get(runtime).avoid() if runtime else frozenset()


# The models the runtime implementations run (export_key), each exported once.
RUNTIME_ROUTES = tuple(dict.fromkeys(export_key(impl) for impl in RUNTIME_SETTINGS))
# The default runtime's (ONNX Runtime's): name -> (route, level).
ORT_SETTINGS = {
    impl: (route, level)
    for impl, (runtime, route, level) in RUNTIME_SETTINGS.items()
    if runtime == runtimes.DEFAULT
}
ORT_IMPLS = tuple(ORT_SETTINGS)
ORT_ROUTES = tuple(dict.fromkeys(route for route, _ in ORT_SETTINGS.values()))
# ONNX Runtime implementations of the hf_llama model only: transformers' own
# ONNX export (OnnxExporter) of the model without opbridge, at ONNX Runtime's
# default level, with ONNX Runtime's fusions (OnnxConfig(ort_fusions="cpu"):
# the anchor a Hugging Face user would pick) and without. Name -> the
# OnnxConfig's keywords.
HF_SETTINGS: dict[str, dict[str, str]] = {"ort_hf_fusions": {"ort_fusions": "cpu"}, "ort_hf": {}}
HF_IMPLS = tuple(HF_SETTINGS)
IMPLS = TORCH_IMPLS + TORCH_FWD_IMPLS + MODEL_IMPLS + HF_IMPLS + RUNTIME_IMPLS
# The floating dtypes a case runs in, by the specs' names.
DTYPES = _dtypes.FLOATING


@dataclass
class Result:
    op: str
    shape: list[int]
    dtype: str
    threads: int
    # "fwd" or "fwd+bwd"
    pass_: str
    impl: str
    median_us: float
    p99_us: float
    gbps: float
    # ONNX Runtime's own operators in the model (ort_contrib, ort_fused).
    fused: list[str] | None = None
    # End-to-end models: the output's largest difference from opbridge_torch's
    # (hf_llama: from transformers' model's, in torch).
    max_abs_diff: float | None = None

    def to_json(self) -> dict:
        data = asdict(self)
        data["pass"] = data.pop("pass_")
        return {k: v for k, v in data.items() if v is not None}


# ---------------------------------------------------------------- operators


def fresh_compile(fn: Callable) -> Callable:
    """torch.compile with no compiled code left from earlier cases (dynamo
    caches per Python function and would hit its recompile limit)."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


class OpCase:
    """One operator as the benchmark runs it, from its card: its
    implementations, inputs and the bytes a pass must move. ``name`` is a
    bare built-in name or a qualified ``namespace::name``."""

    def __init__(self, name: str):
        try:
            self.card = opbridge.ops.card(name)
        except KeyError:
            known = [c.display_name for c in opbridge.ops.cards().values()]
            raise ValueError(
                f"opbridge bench: unknown op {name!r}; choose from {known} (an operator of "
                "another library: --import the module that registers its card)"
            ) from None
        self.name = self.card.display_name

    @property
    def backward(self) -> bool:
        return self.card.bench_backward

    def inputs(self, shape, dtype, requires_grad=False) -> tuple:
        """The call's arguments (tensors and attributes) for size ``shape``."""
        return tuple(self.card.bench_inputs(list(shape), dtype, requires_grad))

    def torch_fn(self, impl: str) -> Callable | None:
        if impl == "torch_composite":
            return self.card.composite
        if impl == "torch_compile":
            return fresh_compile(self.card.composite) if self.card.composite else None
        if impl == "torch_builtin":
            return self.card.builtin
        if impl == "opbridge_torch_out":
            return self.out_call()
        return self.card.call

    def out_call(self) -> Callable | None:
        """The out= form, writing into outputs allocated on the first call;
        None for an operator without one (not built by opbridge)."""
        library = library_for_namespace(self.card.namespace)
        packet = getattr(getattr(torch.ops, self.card.namespace), self.card.name)
        if library is None or "out" not in packet.overloads():
            return None
        op = packet.out
        names = library.specs()[self.card.name]["outputs"]
        names = ["out"] if len(names) == 1 else names
        outs: dict[str, torch.Tensor] = {}

        def call(*args):
            if not outs:
                with torch.no_grad():
                    first = self.card.call(*args)
                first = first if isinstance(first, tuple | list) else (first,)
                outs.update(zip(names, (torch.empty_like(t) for t in first), strict=True))
            return op(*args, **outs)

        return call

    def module(self, args: tuple) -> nn.Module:
        """A module whose inputs are the tensors of ``args`` (the other
        arguments are fixed), for export."""
        call = self.card.call
        is_tensor = [isinstance(a, torch.Tensor) for a in args]

        class Op(nn.Module):
            def forward(self, *tensors):
                given = iter(tensors)
                return call(
                    *[next(given) if t else a for a, t in zip(args, is_tensor, strict=True)]
                )

        return Op()

    def min_bytes(self, args: tuple, pass_: str) -> int:
        """The bytes a pass must move at least. fwd: every input read once,
        every output written once. fwd+bwd adds each output's gradient read,
        and each input that takes a gradient (``requires_grad``) read again
        and its gradient written."""
        with torch.no_grad():
            outputs = self.card.call(*args)
        outputs = tensors_of(outputs if isinstance(outputs, tuple | list) else (outputs,))
        inputs = tensors_of(args)
        fwd = nbytes(inputs) + nbytes(outputs)
        if pass_ == "fwd":
            return fwd
        return fwd + nbytes(outputs) + 2 * nbytes(a for a in inputs if a.requires_grad)


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def tensors_of(args: tuple) -> tuple:
    return tuple(a for a in args if isinstance(a, torch.Tensor))
