"""What the fused forwards of :mod:`opbridge.patching.fused` share: what a
family is (:class:`Family`), the residual add + norm in one kernel, and the
probes that check a fused forward against the layer's own."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from opbridge import nn as obnn
from opbridge.ops import add_layer_norm, add_rms_norm
from opbridge.patching.probe import differs, probing
from opbridge.patching.summary import Leave


@dataclass(frozen=True)
class Family:
    """One layer family's fused forward.

    - ``name``: the family (``"llama"``, ``"gemma2"``, ...).
    - ``kind``: the fusion's kind, shared by families that fuse the same
      thing (``"decoder"``), and ``rule``: how the patch summary names it.
    - ``matches(module)``: whether ``module`` is a layer of this family.
    - ``ready(module)``: raises :class:`Leave` (with the reason) for a layer
      of the family that cannot be fused as it is (its norm not replaced).
    - ``forward(cls)``: the fused ``forward`` for the layer's class ``cls``.
    - ``probe(module, fused_class)``: None when the fused forward computes
      what the layer's own does on a probe, else what differs.
    """

    name: str
    kind: str
    rule: str
    matches: Callable[[nn.Module], bool]
    ready: Callable[[nn.Module], None]
    forward: Callable[[type], Callable]
    probe: Callable[[nn.Module, type], str | None]


def needs(norm: nn.Module, what: str, *types: type) -> None:
    """Raises :class:`Leave` unless ``norm`` (the layer's ``what``) is one of
    opbridge's ``types``: the fused forward calls opbridge's kernel with its
    parameters."""
    if type(norm) not in types:
        raise Leave(f"{what} is {type(norm).__name__}, not replaced")


def children(module: nn.Module) -> set[str]:
    return set(module._modules)


def bound_names(forward: Callable) -> tuple[list[str], dict]:
    """Names of ``forward``'s positional parameters after (self,
    hidden_states), to pass positional arguments on by name, and the
    defaults of its named parameters, which the original passes on
    explicitly."""
    params = list(inspect.signature(forward).parameters.values())[2:]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in params if p.kind in kinds]
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    return names, defaults


def decoder_forward(original: Callable, after_attention: Callable) -> Callable:
    """A decoder layer's fused forward: ``original``'s arguments passed on by
    name, its input norm and attention as they are, then the family's part,
    ``after_attention(self, attended, residual)`` (the residual add fused with
    a norm, and the MLP)."""
    names, defaults = bound_names(original)

    def forward(self, hidden_states, *args, **kwargs):
        kwargs = {**defaults, **kwargs, **dict(zip(names, args, strict=False))}
        attended = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs)[0]
        return after_attention(self, attended, hidden_states)

    functools.update_wrapper(forward, original)
    return forward


def add_norm(norm: nn.Module, x: torch.Tensor, residual: torch.Tensor):
    """``(norm(x + residual), x + residual)`` in one kernel, for an opbridge
    ``RMSNorm`` or ``LayerNorm``."""
    if isinstance(norm, obnn.RMSNorm):
        return add_rms_norm(x, residual, norm.scale(), norm.bias, norm.eps)
    return add_layer_norm(x, residual, norm.weight, norm.bias, norm.eps)


def _param(module: nn.Module) -> torch.Tensor | None:
    return next((p for p in module.parameters() if p.is_floating_point()), None)


def _width(module: nn.Module) -> int | None:
    config = getattr(module, "config", None)
    size = getattr(config, "hidden_size", None)
    if isinstance(size, int):
        return size
    for child in module.modules():
        if isinstance(child, nn.Linear):
            return child.in_features
    return None


def _rotary_tables(module: nn.Module, like: torch.Tensor, generator):
    """cos/sin ``[2, 5, head_dim]`` in Hugging Face's layout (equal halves)
    when ``module`` has a ``head_dim``, else None."""
    attention = module if hasattr(module, "head_dim") else getattr(module, "self_attn", None)
    head_dim = getattr(attention, "head_dim", None)
    if not isinstance(head_dim, int) or head_dim % 2:
        return None
    angles = torch.rand((2, 5, head_dim // 2), generator=generator, dtype=torch.float64) * 6.0
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(like), angles.sin().to(like)


def _first_tensor(out):
    while isinstance(out, tuple | list) and out:
        out = out[0]
    return out if isinstance(out, torch.Tensor) else None


def compare(module: nn.Module, fused: type, call: Callable) -> str | None:
    original = type(module)
    try:
        with probing(module):
            want = _first_tensor(call())
            module.__class__ = fused
            got = _first_tensor(call())
    except Exception as error:
        lines = str(error).strip().splitlines()
        return f"the layer did not run on a probe: {lines[0] if lines else type(error).__name__}"
    finally:
        module.__class__ = original
    if want is None or got is None:
        return "the layer does not return a tensor"
    return differs(got, want)


def probe_layer(module: nn.Module, fused: type, rotary: bool = False) -> str | None:
    """Runs the layer on hidden states ``[2, 5, width]`` (and, with
    ``rotary``, Hugging Face rotary tables) with and without ``fused``."""
    param, width = _param(module), _width(module)
    if param is None or width is None or param.is_meta:
        return "no parameters to probe the layer with"
    generator = torch.Generator().manual_seed(0)
    x = torch.randn((2, 5, width), generator=generator, dtype=torch.float32).to(param)
    kwargs = {}
    if rotary:
        tables = _rotary_tables(module, param, generator)
        if tables is None:
            return "no head_dim to build rotary tables for the probe"
        kwargs = {"position_embeddings": tables, "attention_mask": None}
    return compare(module, fused, lambda: module(x, **kwargs))


probe_rotary_layer = functools.partial(probe_layer, rotary=True)


def probe_post_norm(module: nn.Module, fused: type) -> str | None:
    dense = module.dense
    generator = torch.Generator().manual_seed(0)
    x = torch.randn((2, 3, dense.in_features), generator=generator).to(dense.weight)
    residual = torch.randn((2, 3, dense.out_features), generator=generator).to(dense.weight)
    return compare(module, fused, lambda: module(x, residual))


def decoder_family(
    name: str, rule: str, matches: Callable, after_attention: Callable, norm_before_mlp: str
) -> Family:
    """The family of a decoder layer: its forward kept up to the attention,
    ``after_attention(self, attended, residual)`` from there
    (:func:`decoder_forward`), ready when the layer's ``norm_before_mlp``
    is an RMSNorm, probed with rotary tables."""
    return Family(
        name=name,
        kind="decoder",
        rule=rule,
        matches=matches,
        ready=lambda module: needs(
            getattr(module, norm_before_mlp), "its norm before the MLP", obnn.RMSNorm
        ),
        forward=lambda cls: decoder_forward(cls.forward, after_attention),
        probe=probe_rotary_layer,
    )
