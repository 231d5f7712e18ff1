"""Built-in demo models that use the opbridge operators the way real models
do: random weights from a fixed seed, nothing downloaded.

Each ``build_*`` returns ``(model, example_args)`` like ``demo.build_demo``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from opbridge import nn as obnn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class LlamaStyleBlock(nn.Module):
    """A LLaMA-style decoder block over ``[batch, seq, dim]``: RMSNorm ->
    causal self-attention with rotary embedding -> residual add fused with
    RMSNorm (``add_rms_norm``) -> MLP whose GELU takes the up-projection's
    bias (``bias_gelu``) -> residual add."""

    def __init__(self, dim: int = 64, heads: int = 4, hidden: int = 256, max_seq_len: int = 256):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.attn_norm = obnn.RMSNorm(dim, eps=1e-6)
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.rope = obnn.RotaryEmbedding(self.head_dim, max_seq_len=max_seq_len)
        self.mlp_norm = obnn.AddRMSNorm(dim, eps=1e-6)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.act = obnn.BiasGELU(hidden, approximate="tanh")
        self.down = nn.Linear(hidden, dim)
        causal = torch.full((max_seq_len, max_seq_len), float("-inf")).triu(1)
        self.register_buffer("causal_mask", causal, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[1]
        h = self.attn_norm(x)
        # [batch, seq, heads, head_dim]: the layout rotary_embedding takes.
        q = self.rope(self.q_proj(h).unflatten(-1, (self.heads, self.head_dim)))
        k = self.rope(self.k_proj(h).unflatten(-1, (self.heads, self.head_dim)))
        v = self.v_proj(h).unflatten(-1, (self.heads, self.head_dim))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(self.head_dim))
        scores = scores + self.causal_mask[:seq, :seq]
        attn = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)
        normed, residual = self.mlp_norm(self.o_proj(attn), x)
        return residual + self.down(self.act(self.up(normed)))


class SmallVisionNet(nn.Module):
    """uint8 ``[N, H, W, 3]`` image -> ``normalize_image`` -> two stride-2
    convolutions with ReLU6 (``scaled_clamp``) -> global average -> logits."""

    def __init__(self, channels: int = 16, classes: int = 10):
        super().__init__()
        self.normalize = obnn.NormalizeImage(IMAGENET_MEAN, IMAGENET_STD, channels_last_in=True)
        self.conv1 = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.act1 = obnn.ScaledClamp(1.0)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1)
        self.act2 = obnn.ScaledClamp(1.0)
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.conv1(self.normalize(image)))
        x = self.act2(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


def _perturb_norms(model: nn.Module, generator: torch.Generator) -> None:
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, obnn.RMSNorm | obnn.AddRMSNorm):
                module.weight.copy_(1 + 0.1 * torch.randn(module.weight.shape, generator=generator))
            if isinstance(module, obnn.BiasGELU):
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))


def build_llama_block(seed: int = 0, batch: int = 2, seq: int = 32, dim: int = 64):
    """The LLaMA-style block (random weights, fixed seed) and an input."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = LlamaStyleBlock(dim=dim).eval()
    _perturb_norms(model, generator)
    x = torch.randn(batch, seq, dim, generator=generator)
    return model, (x,)


def build_vision(seed: int = 0, batch: int = 2, size: int = 64):
    """The small vision model (random weights, fixed seed) and a uint8 NHWC image."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = SmallVisionNet().eval()
    image = torch.randint(0, 256, (batch, size, size, 3), generator=generator, dtype=torch.uint8)
    return model, (image,)


DEMO_MODELS: dict[str, Callable] = {"llama_block": build_llama_block, "vision": build_vision}


def demo_report(out_dir: Path, seed: int = 0) -> tuple[list[str], float]:
    """Exports each demo model by both routes (dynamo exporter, dynamic batch),
    runs it in ONNX Runtime and compares with PyTorch: report lines and the
    largest absolute difference."""
    from opbridge import ONNX_DOMAIN
    from opbridge import export as obonnx
    from opbridge.runtimes import onnxruntime as obort
    from opbridge.verify import verify

    lines = [
        "",
        "| model | route | nodes (opbridge) | max abs err vs torch | verify | first divergence |",
        "|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for name, build in DEMO_MODELS.items():
        model, args = build(seed)
        with torch.no_grad():
            expected = model(*args).numpy()
        for route in ("custom", "standard"):
            path = out_dir / f"{name}_{route}.onnx"
            proto = obonnx.export(
                model,
                args,
                path,
                route=route,
                dynamic_batch=True,
                verbose=False,
            )
            session = obort.InferenceSession(str(path))
            got = session.run(None, {session.get_inputs()[0].name: args[0].numpy()})[0]
            err = float(np.abs(got - expected).max())
            worst = max(worst, err)
            report = verify(model, args, onnx_model=proto, route=route, draws=2, seed=seed)
            if not report.passed:
                worst = max(worst, float("inf"))
            custom = sum(n.domain == ONNX_DOMAIN for n in proto.graph.node)
            lines.append(
                f"| {name} | {route} | {len(proto.graph.node)} ({custom}) | {err:.2e} | "
                f"{'PASS' if report.passed else 'FAIL'} | {report.first_divergence or '-'} |"
            )
    return lines, worst
