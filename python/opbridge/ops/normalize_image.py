"""normalize_image: decode-side image preprocessing in one pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from opbridge import _dtypes
from opbridge.ops._card import Card, Layout, Sample, register_card
from opbridge.ops._inputs import bench_generator

if TYPE_CHECKING:
    from opbridge.export.builder import Builder


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
    """Transpose to NCHW (when channels_last_in), Cast a uint8, float16 or
    bfloat16 image to float32, then Div by 255, Sub mean and Div std
    (per-channel [1, C, 1, 1] constants); a float16 or bfloat16 image's
    result is Cast back to its dtype, as the kernel gives it."""
    x = image
    if channels_last_in:
        x = b.op("Transpose", x, perm=[0, 3, 1, 2])
    # Constants take the image's dtype when it is float32 or float64, else float32.
    like = image
    dtype = b.dtype(image)
    if dtype not in ("float32", "float64"):
        x = b.op("Cast", x, to=1)  # FLOAT
        like = None
    shape = b.ints([1, -1, 1, 1])
    mean_t = b.op("Reshape", b.floats(mean, like=like), shape)
    std_t = b.op("Reshape", b.floats(std, like=like), shape)
    scaled = b.op("Div", x, b.floats([255.0], like=like))
    y = b.op("Div", b.op("Sub", scaled, mean_t), std_t)
    if _dtypes.TORCH.get(dtype) in _dtypes.HALF:
        y = b.op("Cast", y, to=_dtypes.ONNX[dtype])
    return y


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def reference(image, mean, std, channels_last_in=True):
    x = image.to(torch.float32) if image.dtype == torch.uint8 else image
    if channels_last_in:
        x = x.permute(0, 3, 1, 2)
    m = torch.tensor(mean, dtype=x.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, -1, 1, 1)
    return ((x / 255 - m) / s).contiguous()


def samples(dtype=torch.float32, requires_grad=False, *, large=True, seed=0):
    g = torch.Generator().manual_seed(seed)

    def image(shape):
        pixels = torch.randint(0, 256, shape, generator=g, dtype=torch.int64)
        return pixels.to(dtype).requires_grad_(requires_grad)

    mean, std = IMAGENET_MEAN, IMAGENET_STD
    yield Sample((image((1, 1, 1, 1)), [0.5], [0.25]), label="one element")
    yield Sample((image((2, 8, 6, 3)), mean, std), label="typical, NHWC")
    yield Sample((image((2, 3, 8, 6)), mean, std, False), label="typical, NCHW in")
    yield Sample((image((1, 1, 1, 3)), mean, std), label="1x1 pixel")
    yield Sample(
        (image((2, 5, 7, 4)), [0.1, 0.2, 0.3, 0.4], [0.5, 1.0, 2.0, -1.0]), label="4 channels"
    )
    # A channels_last-strided NCHW tensor seen as NHWC: non-contiguous.
    noncontig = image((2, 3, 6, 5)).detach().permute(0, 2, 3, 1)
    yield Sample((noncontig.requires_grad_(requires_grad), mean, std), label="non-contiguous")
    if dtype == torch.float32 and not requires_grad:
        pixels = torch.randint(0, 256, (2, 8, 6, 3), generator=g, dtype=torch.uint8)
        yield Sample((pixels, mean, std), label="uint8, NHWC")
        pixels = torch.randint(0, 256, (2, 3, 4, 5), generator=g, dtype=torch.uint8)
        yield Sample((pixels, mean, std, False), label="uint8, NCHW in")
    if large:
        yield Sample((image((1, 2, 30000, 3)), mean, std), label="very long row")
        yield Sample((image((4, 1024, 2, 3)), mean, std), label="many rows")


BENCH_MEAN, BENCH_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def bench_inputs(shape, dtype, requires_grad=False):
    """``[rows, cols]`` becomes a uint8 NHWC image ``[1, rows, cols / 4, 3]``
    (whatever ``dtype``; it has no gradient) and ImageNet's mean and std."""
    rows, cols = shape
    image = torch.randint(
        0, 256, (1, rows, max(1, cols // 4), 3), generator=bench_generator(), dtype=torch.uint8
    )
    return image, BENCH_MEAN, BENCH_STD


def composite(image, mean, std, channels_last_in=True):
    x = image.permute(0, 3, 1, 2) if channels_last_in else image
    x = x.float() if x.dtype == torch.uint8 else x
    m = torch.tensor(mean, dtype=x.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, -1, 1, 1)
    return (x / 255.0 - m) / s


def layout(channels_last_in=True, **_):
    """The image ``[N, H, W, C]`` or ``[N, C, H, W]`` to ``[N, C, H, W]``: the
    channel indexes mean and std, whole; batch and rows and columns shard."""
    image = "nhwc" if channels_last_in else "nchw"
    return Layout({"image": image, "y": "nchw"}, whole="c")


CARD = Card.of_module(
    globals(),
    name="normalize_image",
    call=normalize_image,
    bench_backward=False,
    layout=layout,
)
register_card(CARD)
