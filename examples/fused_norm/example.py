"""A small pre-norm MLP block using fused_norm, for
`opbridge verify examples/fused_norm/example.py:make --route custom`."""

import torch
from my_fused_ops import FusedNorm


class Block(torch.nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.norm = FusedNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


def make():
    torch.manual_seed(0)
    block = Block().eval()
    with torch.no_grad():
        block.norm.weight.uniform_(0.5, 1.5)
        block.norm.bias.uniform_(-0.1, 0.1)
    return block, (torch.randn(4, 16, 64),)
