"""Fused forwards for layers whose fusion spans more than one module.

``opbridge.patch`` replaces modules (norms, GELU); some fusions live in a
layer's ``forward`` instead: the residual add before a norm, and Hugging Face
attention's module-level ``apply_rotary_pos_emb``. For those, ``patch``
changes the class of that one module object to a subclass of its own class
whose ``forward`` uses opbridge's kernels (``isinstance`` still holds, the
parameters and ``state_dict`` keys are untouched) and ``unpatch`` puts the
class back. Other instances of the class, and other models, are not
affected: the function-level rotary patch is a copy of the attention's
``forward`` that sees opbridge's ``apply_rotary_pos_emb`` in its own
globals, not a change to the transformers module.

Each fusion is checked like a module replacement: the layer runs on a probe
(hidden states of its own width and dtype; for attention and decoder layers
also rotary tables in Hugging Face's layout) with its own forward and with
the fused one, and a difference beyond the dtype's tolerance refuses it.

Kinds (each found by the module's structure and class name, transformers
5.x layouts):

- ``decoder``: residual add + RMS norm between attention and MLP in
  Llama-style decoder layers (Llama, Mistral, Qwen2, Qwen3, Gemma, Phi-3),
  as ``add_rms_norm``; Gemma 2/3 layers fuse the add before their
  pre-feed-forward norm.
- ``post_norm``: BERT-style ``LayerNorm(dropout(dense(h)) + input)``
  (``BertSelfOutput``, ``BertOutput`` and their copies), as
  ``add_layer_norm``.
- ``vit_layer``: ViT/DeiT layers' residual add before ``layernorm_after``.
- ``rotary``: attention whose forward calls ``apply_rotary_pos_emb`` (q, k
  as ``[batch, heads, seq, head_dim]``, cos/sin ``[batch, seq, head_dim]``
  with equal halves): opbridge's ``rotary_embedding`` on q and k, seen as
  ``[batch, seq, heads, head_dim]`` (a transposed view, no copy of the
  tables); other layouts and partial rotary fall back to the original
  function at call time.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable

import torch
from torch import nn

from opbridge import nn as obnn
from opbridge.ops import add_layer_norm, add_rms_norm, rotary_embedding

_CACHE: dict[tuple[type, str], type] = {}
_LLAMA_CHILDREN = {
    "input_layernorm",
    "self_attn",
    "post_attention_layernorm",
    "mlp",
    "resid_attn_dropout",
    "resid_mlp_dropout",
}
_GEMMA2_CHILDREN = {
    "input_layernorm",
    "self_attn",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
    "mlp",
}
_POST_NORM_CHILDREN = {"dense", "LayerNorm", "dropout"}
_VIT_CHILDREN = {"attention", "mlp", "layernorm_before", "layernorm_after", "dropout"}
_TIMM_BLOCK_CHILDREN = {"norm1", "attn", "ls1", "drop_path1", "norm2", "mlp", "ls2", "drop_path2"}

RULES = {
    "decoder": "residual add + RMSNorm (decoder layer)",
    "post_norm": "residual add + LayerNorm (post-norm output)",
    "vit_layer": "residual add + LayerNorm (ViT layer)",
    "timm_block": "residual add + norm (timm Block)",
    "rotary": "rotary embedding (apply_rotary_pos_emb)",
}


def _leave(reason: str):
    from opbridge.patching import Leave

    return Leave(reason)


def _kind(module: nn.Module) -> str | None:
    name = type(module).__name__
    children = set(module._modules)
    if name.endswith("DecoderLayer"):
        if children == _GEMMA2_CHILDREN:
            return "decoder"
        if {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"} <= children:
            return "decoder" if children <= _LLAMA_CHILDREN else None
    if name.endswith("Output") and children == _POST_NORM_CHILDREN:
        return "post_norm"
    if name.endswith("Layer") and children <= _VIT_CHILDREN and "layernorm_after" in children:
        return "vit_layer"
    if children == _TIMM_BLOCK_CHILDREN:
        return "timm_block"
    forward = getattr(type(module), "forward", None)
    code = getattr(forward, "__code__", None)
    if (
        code is not None
        and "apply_rotary_pos_emb" in code.co_names
        and callable(forward.__globals__.get("apply_rotary_pos_emb"))
    ):
        return "rotary"
    return None


def rule_of(module: nn.Module) -> str:
    return RULES.get(_kind(module) or "", "fused forward")


def find(module: nn.Module) -> tuple[str, type, Callable] | None:
    """``(rule name, fused class, probe)`` for a module with a fused forward,
    None for any other; raises ``Leave`` for one recognized but not fusable
    (e.g. its norm was not replaced)."""
    kind = _kind(module)
    if kind is None or getattr(type(module), "_opbridge_fused", None):
        return None
    probe = _probe_layer
    if kind == "decoder":
        norm = module._modules.get("pre_feedforward_layernorm") or module.post_attention_layernorm
        if type(norm) is not obnn.RMSNorm:
            raise _leave(f"its norm before the MLP is {type(norm).__name__}, not replaced")
        probe = _probe_rotary_layer
    elif kind == "timm_block":
        if type(module.norm2) not in (obnn.LayerNorm, obnn.RMSNorm):
            raise _leave(f"its norm2 is {type(module.norm2).__name__}, not replaced")
    elif kind in ("post_norm", "vit_layer"):
        norm = module.LayerNorm if kind == "post_norm" else module.layernorm_after
        if type(norm) is not obnn.LayerNorm:
            raise _leave(f"its LayerNorm is {type(norm).__name__}, not replaced")
        if kind == "post_norm":
            probe = _probe_post_norm
    else:  # rotary
        probe = _probe_rotary_layer
    return RULES[kind], _fused_class(type(module), kind), probe


def _fused_class(cls: type, kind: str) -> type:
    key = (cls, kind)
    if key not in _CACHE:
        if kind == "rotary":
            forward = _rebind_rotary(cls.forward)
        elif kind == "decoder":
            forward = _decoder_forward(cls.forward)
        elif kind == "timm_block":
            forward = _timm_block_forward(cls.forward)
        elif kind == "post_norm":
            forward = _post_norm_forward
        else:
            forward = _vit_layer_forward
        namespace = {
            "forward": forward,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "_opbridge_fused": kind,
        }
        _CACHE[key] = type(cls.__name__, (cls,), namespace)
    return _CACHE[key]


# -- forwards -----------------------------------------------------------------


def _bound_names(forward: Callable) -> tuple[list[str], dict]:
    """Names of ``forward``'s positional parameters after (self,
    hidden_states), to pass positional arguments on by name, and the
    defaults of its named parameters, which the original passes on
    explicitly."""
    params = list(inspect.signature(forward).parameters.values())[2:]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in params if p.kind in kinds]
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    return names, defaults


def _add_norm(norm: nn.Module, x: torch.Tensor, residual: torch.Tensor):
    """``(norm(x + residual), x + residual)`` in one kernel, for an opbridge
    ``RMSNorm`` or ``LayerNorm``."""
    if isinstance(norm, obnn.RMSNorm):
        return add_rms_norm(x, residual, norm.scale(), norm.bias, norm.eps)
    return add_layer_norm(x, residual, norm.weight, norm.bias, norm.eps)


def _decoder_forward(original: Callable) -> Callable:
    names, defaults = _bound_names(original)

    def forward(self, hidden_states, *args, **kwargs):
        kwargs = {**defaults, **kwargs, **dict(zip(names, args, strict=False))}
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states=hidden_states, **kwargs)[0]
        if "pre_feedforward_layernorm" in self._modules:  # Gemma 2/3
            hidden_states = self.post_attention_layernorm(hidden_states)
            norm = self.pre_feedforward_layernorm
        else:
            norm = self.post_attention_layernorm
        if "resid_attn_dropout" in self._modules:  # Phi-3
            hidden_states = self.resid_attn_dropout(hidden_states)
        hidden_states, residual = _add_norm(norm, hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        if "post_feedforward_layernorm" in self._modules:
            hidden_states = self.post_feedforward_layernorm(hidden_states)
        if "resid_mlp_dropout" in self._modules:
            hidden_states = self.resid_mlp_dropout(hidden_states)
        return residual + hidden_states

    functools.update_wrapper(forward, original)
    return forward


def _timm_block_forward(original: Callable) -> Callable:
    names, defaults = _bound_names(original)

    def forward(self, x, *args, **kwargs):
        kwargs = {**defaults, **kwargs, **dict(zip(names, args, strict=False))}
        h = self.drop_path1(self.ls1(self.attn(self.norm1(x), **kwargs)))
        normed, x = _add_norm(self.norm2, h, x)
        return x + self.drop_path2(self.ls2(self.mlp(normed)))

    functools.update_wrapper(forward, original)
    return forward


def _post_norm_forward(self, hidden_states, input_tensor):
    hidden_states = self.dropout(self.dense(hidden_states))
    norm = self.LayerNorm
    return add_layer_norm(hidden_states, input_tensor, norm.weight, norm.bias, norm.eps)[0]


def _vit_layer_forward(self, hidden_states, *args, **kwargs):
    residual = hidden_states
    hidden_states = self.attention(self.layernorm_before(hidden_states), *args, **kwargs)[0]
    if "dropout" in self._modules:
        hidden_states = self.dropout(hidden_states)
    norm = self.layernorm_after
    hidden_states, residual = add_layer_norm(
        hidden_states, residual, norm.weight, norm.bias, norm.eps
    )
    hidden_states = self.mlp(hidden_states)
    if "dropout" in self._modules:
        hidden_states = self.dropout(hidden_states)
    return hidden_states + residual


def _opbridge_rotary(original: Callable) -> Callable:
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        if args or set(kwargs) - {"unsqueeze_dim"} or kwargs.get("unsqueeze_dim", 1) != 1:
            return original(q, k, cos, sin, *args, **kwargs)
        width = q.shape[-1]
        if (
            q.dim() != 4
            or k.dim() != 4
            or cos.dim() != 3
            or cos.shape != sin.shape
            or cos.shape[-1] != width
            or k.shape[-1] != width
            or width % 2
            or not q.dtype == k.dtype == cos.dtype == sin.dtype
        ):
            return original(q, k, cos, sin, *args, **kwargs)
        half = width // 2
        # Hugging Face's tables repeat their first half: the kernel takes that
        # half, made contiguous once for both q and k.
        cos, sin = cos[..., :half].contiguous(), sin[..., :half].contiguous()
        q_out = rotary_embedding(q.transpose(1, 2), cos, sin).transpose(1, 2)
        k_out = rotary_embedding(k.transpose(1, 2), cos, sin).transpose(1, 2)
        return q_out, k_out

    return apply_rotary_pos_emb


def _rebind_rotary(forward: Callable) -> Callable:
    """``forward`` with ``apply_rotary_pos_emb`` bound to opbridge's in a
    copy of its globals."""
    scope = dict(forward.__globals__)
    scope["apply_rotary_pos_emb"] = _opbridge_rotary(scope["apply_rotary_pos_emb"])
    rebound = types.FunctionType(
        forward.__code__, scope, forward.__name__, forward.__defaults__, forward.__closure__
    )
    rebound.__kwdefaults__ = forward.__kwdefaults__
    functools.update_wrapper(rebound, forward)
    return rebound


# -- probes -------------------------------------------------------------------


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


def _compare(module: nn.Module, fused: type, call: Callable) -> str | None:
    from opbridge.patching import differs, probing

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


def _probe_layer(module: nn.Module, fused: type, rotary: bool = False) -> str | None:
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
    return _compare(module, fused, lambda: module(x, **kwargs))


_probe_rotary_layer = functools.partial(_probe_layer, rotary=True)


def _probe_post_norm(module: nn.Module, fused: type) -> str | None:
    dense = module.dense
    generator = torch.Generator().manual_seed(0)
    x = torch.randn((2, 3, dense.in_features), generator=generator).to(dense.weight)
    residual = torch.randn((2, 3, dense.out_features), generator=generator).to(dense.weight)
    return _compare(module, fused, lambda: module(x, residual))
