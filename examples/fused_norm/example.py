"""A small pre-norm MLP block using fused_norm and swiglu_clamp, for
`opbridge verify examples/fused_norm/example.py:make --route custom`."""

import torch
from my_fused_ops import FusedNorm, swiglu_clamp


class Block(torch.nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.norm = FusedNorm(dim)
        self.gate = torch.nn.Linear(dim, 2 * dim)
        self.up = torch.nn.Linear(dim, 2 * dim)
        self.down = torch.nn.Linear(2 * dim, dim)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(swiglu_clamp(self.gate(h), self.up(h), 7.0))


def make():
    torch.manual_seed(0)
    block = Block().eval()
    with torch.no_grad():
        block.norm.weight.uniform_(0.5, 1.5)
        block.norm.bias.uniform_(-0.1, 0.1)
    return block, (torch.randn(4, 16, 64),)
