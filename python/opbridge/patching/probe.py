"""How a replacement is checked before ``patch`` makes it: the original
modules and their replacements run on probe inputs built from the modules'
own feature size and dtype, and must agree within the dtype's tolerance."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

# (rtol, atol) of the probe comparison, by the parameters' dtype.
PROBE_TOLERANCE = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}
_PROBE_OTHER = ((2, 5, 7), (5, 7))


def _feature_size(modules: list[nn.Module]) -> int:
    first = modules[0]
    if isinstance(first, nn.Linear):
        return first.in_features
    for param in first.parameters(recurse=False):
        if param.dim() == 1:
            return param.shape[0]
    for param in first.parameters():
        if param.dim() >= 1:
            return param.shape[-1]
    return 8


@contextlib.contextmanager
def probing(*modules: nn.Module):
    """No autograd, and ``modules`` (with their submodules) in eval mode for
    a probe (dropout off), their training flags restored after."""
    modes = [(m, m.training) for root in modules for m in root.modules()]
    try:
        for m, _ in modes:
            m.training = False
        with torch.no_grad():
            yield
    finally:
        for m, training in modes:
            m.training = training


def dtype_of(modules: list[nn.Module]) -> torch.dtype | None:
    for module in modules:
        for param in module.parameters():
            if param.is_meta:
                return None
            if param.is_floating_point():
                return param.dtype
    return torch.get_default_dtype()


def probe(originals: list[nn.Module], replacements: list[nn.Module]) -> str | None:
    """None when the replacements compute what the originals do on every
    probe the originals accept; else what differs."""
    dtype = dtype_of(originals)
    if dtype is None:
        return None  # meta parameters: nothing to run
    size = _feature_size(originals)
    generator = torch.Generator().manual_seed(0)
    shapes = [(2, 3, size), (3, size), (2, size, *_PROBE_OTHER[1]), (*_PROBE_OTHER[0], size)]
    device = next((p.device for m in originals for p in m.parameters()), torch.device("cpu"))
    for shape in shapes:
        x = torch.randn(shape, generator=generator, dtype=torch.float32).to(device, dtype)
        try:
            with probing(*originals):
                want = nn.Sequential(*originals)(x)
        except Exception:
            continue  # not an input the original takes
        try:
            with probing(*replacements):
                got = nn.Sequential(*replacements)(x)
        except Exception as error:
            lines = str(error).strip().splitlines()
            return (
                f"on a probe of shape {list(shape)} the original ran, the replacement raised: "
                f"{lines[0] if lines else type(error).__name__}"
            )
        if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
            continue  # tuple outputs: compared by the caller's tests, not here
        mismatch = differs(got, want)
        if mismatch is not None:
            kind = str(dtype).removeprefix("torch.")
            return f"on a probe of shape {list(shape)} ({kind}) {mismatch}"
    return None  # also when no probe fits the original: nothing to compare


def differs(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """None when ``got`` matches ``want`` within :data:`PROBE_TOLERANCE` for
    ``want``'s dtype, else how they differ."""
    rtol, atol = PROBE_TOLERANCE.get(want.dtype, PROBE_TOLERANCE[torch.float32])
    if got.shape != want.shape:
        return f"the output shape is {list(got.shape)}, the original's {list(want.shape)}"
    error = (got.double() - want.double()).abs()
    if not bool((error <= atol + rtol * want.double().abs()).all()):
        return (
            f"the outputs differ by up to {error.max().item():.3g} (tolerance {atol:g} + "
            f"{rtol:g} * |x|)"
        )
    return None
