"""End-to-end models for ``opbridge bench``, and what the benchmark needs
around them: the same model without opbridge's kernels, the ONNX Runtime
operators a model holds, and the share of time a profile puts in
opbridge's operators and in matrix products.

Models (random weights from a fixed seed, nothing downloaded):

- ``llama_prefill``: a stack of :class:`opbridge.demo.models.LlamaStyleBlock`
  (hidden 1024, 16 heads, 4 layers, MLP 2816) and a final RMSNorm over
  hidden states ``[1, 512, 1024]`` (no embedding or output projection).
- ``llama_decode``: the same stack on ``[8, 16, 1024]``. The block has no
  KV cache, so one decode step with a 512-token context cannot be expressed;
  a batch of 8 short sequences of 16 tokens stands in for a decode-sized
  step (few tokens per weight read).
- ``vision``: :class:`opbridge.demo.models.SmallVisionNet` on a uint8
  ``[1, 224, 224, 3]`` image.
- ``hf_llama``: transformers' ``LlamaForCausalLM`` with grouped-query
  attention (hidden 1024, 4 layers, 16 heads, 4 key/value heads, vocab
  4096), prefill of ``input_ids [1, 256]`` to the logits; its model is the
  ``opbridge.patch``-ed copy, and its ONNX models come from transformers' own
  exporter (:class:`TransformersExports`): the copy by opbridge's routes,
  and transformers' model as it is with and without ONNX Runtime's fusions
  (``OnnxConfig(ort_fusions="cpu")``: ``ort_hf_fusions``, the anchor). It
  needs transformers with ``transformers.exporters`` (:func:`check_models`)
  and runs only when named (not in ``DEFAULT_MODELS``).

``quick=True`` builds the same models at toy sizes (the benchmark's
``--quick``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from opbridge import nn as obnn
from opbridge._library import library_for_domain
from opbridge.bench.cases import export_parts
from opbridge.demo.models import LlamaStyleBlock, SmallVisionNet
from opbridge.export.routes import door_routes
from opbridge.ops import card

MODEL_NAMES = ("llama_prefill", "llama_decode", "vision", "hf_llama")
# The models a run that names none runs: hf_llama (a transformers model,
# exported by transformers' exporter once per route) only when named.
DEFAULT_MODELS = ("llama_prefill", "llama_decode", "vision")

MICROSOFT_DOMAIN = "com.microsoft"
# ONNX Runtime's own operators that it registers in the ai.onnx domain.
ORT_ONNX_DOMAIN_OPS = frozenset({"SimplifiedLayerNormalization"})


# ---------------------------------------------------------------- models


class LlamaStack(nn.Module):
    """``layers`` LLaMA-style decoder blocks and a final RMSNorm over
    hidden states ``[batch, seq, dim]``."""

    def __init__(self, dim: int, heads: int, mlp: int, layers: int, max_seq_len: int):
        super().__init__()
        self.blocks = nn.ModuleList(
            LlamaStyleBlock(dim=dim, heads=heads, hidden=mlp, max_seq_len=max_seq_len)
            for _ in range(layers)
        )
        self.norm = obnn.RMSNorm(dim, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


@dataclass
class ModelCase:
    """One end-to-end model as the benchmark runs it: the model with
    opbridge's modules, its inputs, and a line that says what it is.

    - ``plain``: the same model without opbridge, where there is one of its
      own (hf_llama: transformers' model as it is): the ``torch_composite``
      implementation, and the output every implementation's is checked
      against; None: :func:`composite_twin` of ``model``, and outputs are
      checked against ``model``'s.
    - ``input_names``: the inputs' names in the ONNX models (None: the
      positional ``input_0``, ``input_1``, ... of
      :func:`opbridge.bench.export_onnx`); sessions are fed by these names.
    - ``exports``: the case's own exporter (None: :func:`opbridge.bench.export_onnx`).
    """

    name: str
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    description: str
    plain: nn.Module | None = None
    input_names: tuple[str, ...] | None = None
    exports: TransformersExports | None = None

    def named_inputs(self) -> dict[str, torch.Tensor]:
        """The inputs by their names in the ONNX models."""
        names = self.input_names or tuple(f"input_{i}" for i in range(len(self.inputs)))
        return dict(zip(names, self.inputs, strict=True))

    @property
    def shape(self) -> list[int]:
        return list(self.inputs[0].shape)

    @property
    def dtype(self) -> str:
        return str(self.inputs[0].dtype).removeprefix("torch.")

    def min_bytes(self, output: torch.Tensor) -> int:
        """What one call must move at least: every weight and input read
        once, the output written once."""
        tensors = [*self.model.parameters(), *self.inputs, output]
        return sum(t.numel() * t.element_size() for t in tensors)


# Full size and --quick size of each model's settings.
LLAMA_SIZES = {
    False: dict(dim=1024, heads=16, mlp=2816, layers=4, prefill=(1, 512), decode=(8, 16)),
    True: dict(dim=64, heads=4, mlp=128, layers=2, prefill=(1, 32), decode=(2, 4)),
}
VISION_SIZES = {False: (1, 224), True: (1, 32)}
HF_LLAMA_SIZES = {
    False: dict(hidden=1024, layers=4, heads=16, kv_heads=4, vocab=4096, seq=256),
    True: dict(hidden=64, layers=2, heads=4, kv_heads=2, vocab=256, seq=16),
}


def _randomize(model: nn.Module, generator: torch.Generator) -> None:
    """Norm weights around 1 and GELU biases around 0, so that no weight is
    the identity (random Linear and Conv weights come from their own init)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, obnn.RMSNorm):
                module.weight.copy_(1 + 0.1 * torch.randn(module.weight.shape, generator=generator))
            elif isinstance(module, obnn.BiasGELU):
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))


def build_llama(quick: bool, seed: int = 0) -> tuple[LlamaStack, dict]:
    size = LLAMA_SIZES[quick]
    torch.manual_seed(seed)
    seq = max(size["prefill"][1], size["decode"][1])
    model = LlamaStack(size["dim"], size["heads"], size["mlp"], size["layers"], seq).eval()
    _randomize(model, torch.Generator().manual_seed(seed))
    return model, size


def build_cases(names: list[str], quick: bool = False, seed: int = 0) -> list[ModelCase]:
    """The named models (of ``MODEL_NAMES``), full size or ``quick``; a
    ValueError for an unknown one or one whose packages are missing
    (:func:`check_models`)."""
    unknown = [n for n in names if n not in MODEL_NAMES]
    if unknown:
        raise ValueError(f"opbridge bench: unknown model {unknown}; choose from {MODEL_NAMES}")
    check_models(names)
    generator = torch.Generator().manual_seed(seed)
    cases = []
    llama = None
    for name in names:
        if name == "hf_llama":
            cases.append(build_hf_llama(quick, seed, generator))
        elif name.startswith("llama_"):
            if llama is None:
                llama = build_llama(quick, seed)
            model, size = llama
            batch, seq = size[name.removeprefix("llama_")]
            shape = (batch, seq, size["dim"])
            what = (
                f"{size['layers']} LlamaStyleBlocks + RMSNorm, hidden {size['dim']}, "
                f"{size['heads']} heads, MLP {size['mlp']}"
            )
            if name == "llama_decode":
                what += (
                    f"; no KV cache in the block, so a decode-sized step stands in: batch {batch},"
                    f" {seq} tokens"
                )
            cases.append(ModelCase(name, model, (torch.randn(shape, generator=generator),), what))
        else:
            batch, side = VISION_SIZES[quick]
            torch.manual_seed(seed)
            model = SmallVisionNet().eval()
            image = torch.randint(
                0, 256, (batch, side, side, 3), generator=generator, dtype=torch.uint8
            )
            cases.append(
                ModelCase(name, model, (image,), f"SmallVisionNet, uint8 NHWC {side}x{side}")
            )
    return cases


# ---------------------------------------------------------------- hf_llama


def hf_missing() -> list[str]:
    """What hf_llama needs that is not installed: transformers with its ONNX
    exporter (``transformers.exporters``), and onnx_ir (the exporter's
    model); empty when all are."""
    missing = []
    try:
        transformers = importlib.import_module("transformers")
    except ImportError:
        missing.append("transformers (with its ONNX exporter, transformers.exporters)")
    else:
        try:
            importlib.import_module("transformers.exporters")
        except ImportError:
            missing.append(
                f"transformers' ONNX exporter (transformers.exporters), which transformers "
                f"{transformers.__version__} lacks"
            )
    try:
        importlib.import_module("onnx_ir")
    except ImportError:
        missing.append("onnx_ir")
    return missing


def check_models(names: list[str]) -> None:
    """Refuses a named model whose packages are not installed: a ValueError
    that names what is missing."""
    if "hf_llama" in names:
        missing = hf_missing()
        if missing:
            raise ValueError(
                f"opbridge bench: the hf_llama model needs {' and '.join(missing)}, not "
                "installed; install it, or leave hf_llama out of --models"
            )


class Logits(nn.Module):
    """A Hugging Face causal LM called on ``input_ids`` alone, returning its
    logits (the output every implementation's is compared by; transformers'
    ONNX export returns them first)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits


class TransformersExports:
    """ONNX models of a Hugging Face model by transformers' own exporter
    (``transformers.exporters.OnnxExporter``) on the keyword ``inputs``, each
    serialized: the model as it is by an ``OnnxConfig``'s settings
    (:meth:`plain_model`; ``ort_fusions="cpu"`` has ONNX Runtime's fusions
    applied to the export), and its ``opbridge.patch``-ed copy by one of
    opbridge's routes (:meth:`route_model`, under
    :func:`opbridge.export.route`)."""

    def __init__(self, plain: nn.Module, patched: nn.Module, inputs: dict[str, torch.Tensor]):
        self.plain = plain
        self.patched = patched
        self.inputs = inputs

    @staticmethod
    def takes(key: str) -> bool:
        """Whether :meth:`route_model` exports by an export key
        (:func:`opbridge.bench.cases.export_key`): a route PyTorch's
        exporters take alone (:func:`~opbridge.export.routes.door_routes`),
        not the function route or a runtime's rewrite."""
        return export_parts(key)[0] in door_routes()

    def plain_model(self, **config) -> bytes:
        return self._export(self.plain, config)

    def route_model(self, key: str) -> bytes:
        """The patched copy by an export key's route, without the forms its
        runtime computes wrong (``custom@openvino``)."""
        import opbridge

        route, avoid = export_parts(key)
        if route not in door_routes():
            raise ValueError(
                f"transformers' exporter takes the routes {door_routes()}, not {key!r}"
            )
        with opbridge.export.route(route, avoid=avoid):
            return self._export(self.patched, {})

    def _export(self, model: nn.Module, config: dict) -> bytes:
        import onnx_ir
        from transformers.exporters import OnnxConfig, OnnxExporter

        # The exporter prints its progress; the trace must leave the inputs as they are.
        with contextlib.redirect_stdout(io.StringIO()):
            exported = OnnxExporter().export(
                model, copy.deepcopy(self.inputs), config=OnnxConfig(**config)
            )
        return onnx_ir.to_proto(exported.program).SerializeToString()


def build_hf_llama(quick: bool, seed: int, generator: torch.Generator) -> ModelCase:
    """hf_llama: a random-init transformers ``LlamaForCausalLM`` with
    grouped-query attention, its ``opbridge.patch``-ed copy as the model and
    the original as ``plain``, on a prompt from ``generator``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    import opbridge

    size = HF_LLAMA_SIZES[quick]
    mlp = size["hidden"] * 8 // 3 // 64 * 64
    config = LlamaConfig(
        vocab_size=size["vocab"],
        hidden_size=size["hidden"],
        intermediate_size=mlp,
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["kv_heads"],
        max_position_embeddings=size["seq"],
    )
    torch.manual_seed(seed)
    plain = LlamaForCausalLM(config).eval()
    patched = opbridge.patch(copy.deepcopy(plain))
    ids = torch.randint(0, size["vocab"], (1, size["seq"]), generator=generator)
    what = (
        f"transformers LlamaForCausalLM (random init), hidden {size['hidden']}, "
        f"{size['layers']} layers, {size['heads']} heads ({size['kv_heads']} key/value heads: "
        f"grouped-query attention), MLP {mlp}, vocab {size['vocab']}; prefill of {size['seq']} "
        "tokens to the logits. opbridge_torch: the opbridge.patch-ed copy; torch_composite: "
        "transformers' model as it is, whose logits every output is checked against; ONNX "
        "models by transformers' OnnxExporter: ort_hf_fusions (ort_fusions='cpu', the anchor) "
        "and ort_hf of transformers' model, the other ort_ and ov_ rows of the patched copy by "
        "opbridge's routes"
    )
    return ModelCase(
        "hf_llama",
        Logits(patched),
        (ids,),
        what,
        plain=Logits(plain),
        input_names=("input_ids",),
        exports=TransformersExports(plain, patched, {"input_ids": ids}),
    )


# ---------------------------------------------------------------- without opbridge


class Composite(nn.Module):
    """An opbridge module computed by its operator's card composite (the
    formula in small PyTorch operations): what the model is without
    opbridge. Holds the original as ``source`` (same parameters)."""

    def __init__(self, source: nn.Module, op: str, arguments: Callable):
        super().__init__()
        self.source = source
        self.op = op
        self.composite = card(op).composite
        self.arguments = arguments

    def forward(self, *inputs):
        return self.composite(*self.arguments(self.source, *inputs))

    def extra_repr(self) -> str:
        return f"composite of {self.op}"


def _rope_arguments(m: obnn.RotaryEmbedding, x):
    seq = x.shape[1]
    return x, m.cos[:seq], m.sin[:seq], m.interleaved


# Each opbridge module (exact type) -> its operator and the operator's
# arguments from the module and its inputs, as the module's forward passes them.
COMPOSITE_ARGUMENTS: dict[type, tuple[str, Callable]] = {
    obnn.RMSNorm: ("rms_norm", lambda m, x: (x, m.scale(), m.bias, m.eps)),
    obnn.AddRMSNorm: ("add_rms_norm", lambda m, x, r: (x, r, m.scale(), m.bias, m.eps)),
    obnn.LayerNorm: ("layer_norm", lambda m, x: (x, m.weight, m.bias, m.eps)),
    obnn.AddLayerNorm: ("add_layer_norm", lambda m, x, r: (x, r, m.weight, m.bias, m.eps)),
    obnn.BiasGELU: ("bias_gelu", lambda m, x: (x, m.bias, m.approximate)),
    obnn.RotaryEmbedding: ("rotary_embedding", _rope_arguments),
    obnn.NormalizeImage: (
        "normalize_image",
        lambda m, image: (image, m.mean, m.std, m.channels_last_in),
    ),
    obnn.ScaledClamp: ("scaled_clamp", lambda m, x: (x, m.scale, m.min_val, m.max_val)),
}


def composite_twin(model: nn.Module) -> nn.Module:
    """A copy of ``model`` (sharing its parameters and buffers) whose opbridge
    modules compute with their operators' composites instead."""
    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    twin = copy.deepcopy(model, memo=shared)
    for parent in list(twin.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Composite):
                continue
            if type(child) in COMPOSITE_ARGUMENTS:
                op, arguments = COMPOSITE_ARGUMENTS[type(child)]
                setattr(parent, name, Composite(child, op, arguments))
            elif type(child).__module__ == obnn.__name__ and not list(child.children()):
                raise TypeError(
                    f"opbridge bench: no composite for {type(child).__name__} ({name}); add it "
                    "to opbridge.bench.models.COMPOSITE_ARGUMENTS"
                )
    return twin


# ---------------------------------------------------------------- ONNX Runtime operators


def contrib_ops(proto) -> list[str]:
    """ONNX Runtime's own operators in a model: its ``com.microsoft`` op
    types and the ones it registers in the ai.onnx domain, sorted."""
    return sorted(
        {
            node.op_type
            for node in proto.graph.node
            if node.domain == MICROSOFT_DOMAIN
            or (node.domain in ("", "ai.onnx") and node.op_type in ORT_ONNX_DOMAIN_OPS)
        }
    )


# ---------------------------------------------------------------- profiles

TORCH_MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::conv2d",
        "aten::convolution",
        "aten::_convolution",
        "aten::mkldnn_convolution",
    }
)


@dataclass
class Profile:
    """Shares of profiled operator time: opbridge's operators, matrix
    products (MatMul/Gemm and convolutions) and everything else; ``top``:
    the largest op types with their share (percent)."""

    opbridge_pct: float
    matmul_pct: float
    other_pct: float
    top: list[tuple[str, float]] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"opbridge ops {self.opbridge_pct:.1f}%, matrix products {self.matmul_pct:.1f}%, "
            f"other {self.other_pct:.1f}%"
        )


def shares(times: dict[str, float], is_opbridge: Callable, is_matmul: Callable) -> Profile:
    """A :class:`Profile` from time per op type."""
    total = sum(times.values())
    if total <= 0:
        raise ValueError("the profile recorded no operator time")
    ours = sum(t for op, t in times.items() if is_opbridge(op))
    matmul = sum(t for op, t in times.items() if not is_opbridge(op) and is_matmul(op))
    top = sorted(times.items(), key=lambda item: -item[1])[:6]
    return Profile(
        opbridge_pct=100 * ours / total,
        matmul_pct=100 * matmul / total,
        other_pct=100 * (total - ours - matmul) / total,
        top=[(op, 100 * t / total) for op, t in top],
    )


def runtime_profile(
    runtime, model: bytes, feeds: dict, threads: int, calls: int, level: str
) -> Profile:
    """The shares of ``runtime``'s profile of ``model`` (its
    :attr:`~opbridge.runtimes.BenchHooks.profile`: one untimed run, then
    ``calls`` profiled). opbridge's operators: op types of nodes in a loaded
    operator library's domain; matrix products: the runtime's
    ``matmul_ops``."""
    import onnx

    ours = {
        node.op_type
        for node in onnx.load_from_string(model).graph.node
        if library_for_domain(node.domain) is not None
    }
    times = runtime.bench.profile(model, feeds, threads, calls, level)
    return shares(times, lambda op: op in ours, lambda op: op in runtime.bench.matmul_ops)


def torch_profile(fn: Callable[[], object], calls: int) -> Profile:
    """Runs ``fn`` once untimed, then ``calls`` times under
    ``torch.profiler``, and sums the time of top-level operators (each with
    what it calls) by name: ``opbridge::*`` are opbridge's."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    # The profiler's native code writes progress lines to file descriptor 2.
    with _native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    times: dict[str, float] = {}
    for event in prof.events():
        if event.cpu_parent is None:
            times[event.name] = times.get(event.name, 0.0) + event.cpu_time_total
    return shares(times, lambda op: op.startswith("opbridge::"), lambda op: op in TORCH_MATMUL_OPS)


@contextlib.contextmanager
def _native_stderr_silenced():
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
