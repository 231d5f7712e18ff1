"""Attention whose forward calls Hugging Face's ``apply_rotary_pos_emb``
(q, k as ``[batch, heads, seq, head_dim]``, cos/sin ``[batch, seq,
head_dim]`` with equal halves): opbridge's ``rotary_embedding`` on q and k,
seen as ``[batch, seq, heads, head_dim]`` (a transposed view, no copy of the
tables); other layouts and partial rotary fall back to the original function
at call time. The forward is a copy of the attention's that sees opbridge's
``apply_rotary_pos_emb`` in its own globals, not a change to the
transformers module."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable

from torch import nn

from opbridge.ops import rotary_embedding
from opbridge.patching.forwards import Family, probe_rotary_layer


def opbridge_rotary(original: Callable) -> Callable:
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


def rebind(forward: Callable) -> Callable:
    """``forward`` with ``apply_rotary_pos_emb`` bound to opbridge's in a
    copy of its globals."""
    scope = dict(forward.__globals__)
    scope["apply_rotary_pos_emb"] = opbridge_rotary(scope["apply_rotary_pos_emb"])
    rebound = types.FunctionType(
        forward.__code__, scope, forward.__name__, forward.__defaults__, forward.__closure__
    )
    rebound.__kwdefaults__ = forward.__kwdefaults__
    functools.update_wrapper(rebound, forward)
    return rebound


def _matches(module: nn.Module) -> bool:
    forward = getattr(type(module), "forward", None)
    code = getattr(forward, "__code__", None)
    return (
        code is not None
        and "apply_rotary_pos_emb" in code.co_names
        and callable(forward.__globals__.get("apply_rotary_pos_emb"))
    )


FAMILY = Family(
    name="rotary",
    kind="rotary",
    rule="rotary embedding (apply_rotary_pos_emb)",
    matches=_matches,
    ready=lambda module: None,
    forward=lambda cls: rebind(cls.forward),
    probe=probe_rotary_layer,
)
