"""A tiny Llama-style model for the distributed tests and benchmark: pre-norm
blocks of attention with rotary embedding and an MLP with a biased GELU,
written once with opbridge's ops (``fused=True``: rms_norm,
rotary_embedding, add_rms_norm, bias_gelu) and once with PyTorch's.

Tensor + sequence parallel (:func:`parallelize`): the norms shard the
sequence (``SequenceParallel``), q/k/v and the MLP's up projection are
column-parallel (heads and hidden units sharded; the up projection's bias
too), the output projections row-parallel; the residual add + norm takes
its DTensor inputs sharded on the sequence."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import opbridge
from opbridge.ops import builtin_module

rotary_card = builtin_module("rotary_embedding")

DIM, HEADS, HIDDEN, SEQ, BATCH, BLOCKS = 32, 4, 64, 8, 4, 2
HEAD_DIM = DIM // HEADS
EPS = 1e-6


def configure(**sizes: int) -> None:
    """Other sizes (``dim``, ``heads``, ``hidden``, ``seq``, ``batch``,
    ``blocks``) for the models built from now on (the benchmark's)."""
    for name, value in sizes.items():
        globals()[name.upper()] = value
    globals()["HEAD_DIM"] = DIM // HEADS


def _dtensor():
    from torch.distributed.tensor import DTensor

    return DTensor


def _local(x):
    return x.to_local() if isinstance(x, _dtensor()) else x


def _like(table, x):
    """``table`` replicated on ``x``'s mesh when ``x`` is a DTensor."""
    DTensor = _dtensor()
    if isinstance(x, DTensor) and not isinstance(table, DTensor):
        from torch.distributed.tensor import Replicate

        placements = [Replicate()] * x.device_mesh.ndim
        return DTensor.from_local(table, x.device_mesh, placements, run_check=False)
    return table


class RMSNorm(nn.Module):
    def __init__(self, fused: bool):
        super().__init__()
        self.fused = fused
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(DIM))

    def forward(self, x):
        if self.fused:
            return opbridge.rms_norm(x, self.weight, None, EPS)
        return F.rms_norm(x, (DIM,), self.weight, EPS)


class AddRMSNorm(nn.Module):
    """``(norm(x + residual), x + residual)``."""

    def __init__(self, fused: bool):
        super().__init__()
        self.fused = fused
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(DIM))

    def forward(self, x, residual):
        if self.fused:
            return opbridge.add_rms_norm(x, residual, self.weight, None, EPS)
        summed = x + residual
        return F.rms_norm(summed, (DIM,), self.weight, EPS), summed


class LinearGelu(nn.Linear):
    """``gelu(x @ weight.T + bias)``: a linear layer (column-parallel under
    TP, its bias sharded with it) whose bias goes into the GELU."""

    def __init__(self, fused: bool):
        super().__init__(DIM, HIDDEN)
        self.fused = fused

    def forward(self, x):
        h = F.linear(x, self.weight)
        if self.fused:
            return opbridge.bias_gelu(h, self.bias)
        return F.gelu(h + self.bias)


class Attention(nn.Module):
    def __init__(self, fused: bool):
        super().__init__()
        self.fused = fused
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))

    def rotate(self, x, cos, sin):
        cos, sin = _like(cos, x), _like(sin, x)
        if self.fused:
            return opbridge.rotary_embedding(x, cos, sin)
        return rotary_card.composite(x, cos, sin)

    def forward(self, x, cos, sin):
        batch, seq = x.shape[0], x.shape[1]
        q, k, v = (w(x).view(batch, seq, HEADS, HEAD_DIM) for w in (self.wq, self.wk, self.wv))
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        # Heads are local under TP: attention runs on each rank's own.
        q, k, v = (_local(t).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).flatten(2))


class Block(nn.Module):
    def __init__(self, fused: bool):
        super().__init__()
        self.attention_norm = RMSNorm(fused)
        self.attention = Attention(fused)
        self.mlp_norm = AddRMSNorm(fused)
        self.up = LinearGelu(fused)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x, cos, sin):
        attended = self.attention(self.attention_norm(x), cos, sin)
        normed, residual = self.mlp_norm(attended, x)
        return residual + self.down(self.up(normed))


class Model(nn.Module):
    def __init__(self, fused: bool = True, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.blocks = nn.ModuleList(Block(fused) for _ in range(BLOCKS))
        self.norm = RMSNorm(fused)
        cos, sin = rotary_card.tables_from_positions(
            torch.arange(SEQ)[None], HEAD_DIM // 2, torch.float32
        )
        self.register_buffer("cos", cos[0], persistent=False)
        self.register_buffer("sin", sin[0], persistent=False)

    def forward(self, x):
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.norm(x)


def inputs(steps: int = 3, seed: int = 1) -> list[torch.Tensor]:
    """One ``[BATCH, SEQ, DIM]`` batch per training step."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(BATCH, SEQ, DIM, generator=g) for _ in range(steps)]


def loss_of(y: torch.Tensor) -> torch.Tensor:
    return (y * torch.linspace(-1, 1, DIM)).square().mean()


def parallelize(model: Model, mesh) -> Model:
    """Tensor + sequence parallel on a 1-D mesh: the model's input and output
    are DTensors sharded on the sequence (dim 1)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_module
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    for block in model.blocks:
        parallelize_module(
            block,
            mesh,
            {
                "attention_norm": SequenceParallel(),
                # One all-gather of the sequence for q, k and v.
                "attention": PrepareModuleInput(
                    input_layouts=(Shard(1), None, None),
                    desired_input_layouts=(Replicate(), None, None),
                ),
                "attention.wq": ColwiseParallel(use_local_output=False),
                "attention.wk": ColwiseParallel(use_local_output=False),
                "attention.wv": ColwiseParallel(use_local_output=False),
                "attention.wo": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
                "up": ColwiseParallel(input_layouts=Shard(1)),
                "down": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            },
        )
        # Two DTensor inputs, both sharded on the sequence already; only the
        # weight needs distributing (replicated).
        distribute_module(block.mlp_norm, mesh)
    parallelize_module(model.norm, mesh, SequenceParallel())
    return model
