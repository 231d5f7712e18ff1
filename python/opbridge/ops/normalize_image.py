"""normalize_image: decode-side image preprocessing in one pass."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from opbridge.ops._builder import Builder


def normalize_image(
    image: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    channels_last_in: bool = True,
) -> torch.Tensor:
    """``(image / 255 - mean[c]) / std[c]`` per channel, to ``[N, C, H, W]``.

    ``image`` is ``[N, H, W, C]`` (``channels_last_in=True``, as decoders
    produce) or ``[N, C, H, W]``; ``mean`` and ``std`` hold one value per
    channel (on the 0..1 scale, e.g. ImageNet's ``(0.485, 0.456, 0.406)``).
    A uint8 image gives float32 and has no gradient. A float32/float64 image
    is read on the same 0..255 scale (the result equals that of the uint8
    image it was cast from), keeps its dtype and is differentiable; to
    normalize a float image already in [0, 1], multiply it by 255 first or
    call ``torchvision.transforms.functional.normalize``.
    """
    return torch.ops.opbridge.normalize_image.default(
        image, [float(v) for v in mean], [float(v) for v in std], channels_last_in
    )


def standard(b: Builder, image, *, mean: list[float], std: list[float], channels_last_in: int):
    """Transpose to NCHW (when channels_last_in), Cast a uint8 image to float32,
    then Div by 255, Sub mean and Div std (per-channel [1, C, 1, 1] constants)."""
    x = image
    if channels_last_in:
        x = b.op("Transpose", x, perm=[0, 3, 1, 2])
    # Constants take the image's dtype when it is floating, else float32.
    like = image
    if b.dtype(image) not in ("float32", "float64"):
        x = b.op("Cast", x, to=1)  # FLOAT
        like = None
    shape = b.ints([1, -1, 1, 1])
    mean_t = b.op("Reshape", b.floats(mean, like=like), shape)
    std_t = b.op("Reshape", b.floats(std, like=like), shape)
    scaled = b.op("Div", x, b.floats([255.0], like=like))
    return b.op("Div", b.op("Sub", scaled, mean_t), std_t)
