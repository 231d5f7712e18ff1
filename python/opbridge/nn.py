"""Modules built on the opbridge operators."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from opbridge import ops


class ScaledClamp(nn.Module):
    """``clamp(x * scale, min_val, max_val)``; ``ScaledClamp(1.0)`` is ReLU6."""

    def __init__(self, scale: float, min_val: float = 0.0, max_val: float = 6.0):
        super().__init__()
        self.scale = float(scale)
        self.min_val = float(min_val)
        self.max_val = float(max_val)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.scaled_clamp(x, self.scale, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"scale={self.scale}, min_val={self.min_val}, max_val={self.max_val}"


class RMSNorm(nn.Module):
    """RMS normalization over the last dimension.

    Matches ``torch.nn.RMSNorm(dim, eps)`` (same ``weight`` parameter, ones at
    start) when ``bias=False``; ``bias=True`` adds a ``bias`` parameter
    (zeros at start). ``offset`` scales by ``offset + weight`` instead of
    ``weight`` (``offset=1.0``: Gemma-style norms, whose weight starts at 0).
    """

    def __init__(
        self,
        dim: int,
        eps: float = 1e-6,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        offset: float = 0.0,
    ):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.dim = int(dim)
        self.eps = float(eps)
        self.offset = float(offset)
        self.weight = nn.Parameter(torch.ones(self.dim, **factory))
        if bias:
            self.bias = nn.Parameter(torch.zeros(self.dim, **factory))
        else:
            self.register_parameter("bias", None)

    def scale(self) -> torch.Tensor:
        """The weight the kernel scales by: ``offset + weight``."""
        return self.weight + self.offset if self.offset else self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(x, self.scale(), self.bias, self.eps)

    def extra_repr(self) -> str:
        offset = f", offset={self.offset}" if self.offset else ""
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}{offset}"


class AddRMSNorm(RMSNorm):
    """The pre-norm residual step: ``forward(x, residual)`` returns
    ``(rms_norm(x + residual), x + residual)`` in one pass.

    Parameters as :class:`RMSNorm` (``weight``, optional ``bias``).
    """

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ops.add_rms_norm(x, residual, self.scale(), self.bias, self.eps)


class LayerNorm(nn.Module):
    """Layer normalization over the last dimension: a drop-in for
    ``torch.nn.LayerNorm(dim, eps, elementwise_affine, bias)`` (same
    ``weight`` and ``bias`` parameters and state_dict keys, ones and zeros
    at start; ``normalized_shape`` is ``(dim,)``).
    """

    def __init__(
        self,
        dim: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if not isinstance(dim, int):
            shape = tuple(dim)
            if len(shape) != 1:
                raise ValueError(
                    f"opbridge.nn.{type(self).__name__} normalizes the last dimension only: "
                    f"dim must be an int or a 1-element shape, got {shape}"
                )
            dim = shape[0]
        factory = {"device": device, "dtype": dtype}
        self.normalized_shape = (int(dim),)
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        if self.elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, **factory))
            if bias:
                self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **factory))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class LayerNorm2d(LayerNorm):
    """Layer normalization over the channels of ``[N, C, H, W]`` input (timm's
    ``LayerNorm2d``, ConvNeXt's channels-first norm): the last-dimension
    kernel on the channels-last view. Parameters as :class:`LayerNorm`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = ops.layer_norm(x.permute(0, 2, 3, 1), self.weight, self.bias, self.eps)
        return y.permute(0, 3, 1, 2)


class AddLayerNorm(LayerNorm):
    """The residual step: ``forward(x, residual)`` returns
    ``(layer_norm(x + residual), x + residual)`` in one pass.

    Parameters as :class:`LayerNorm` (optional ``weight`` and ``bias``).
    """

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ops.add_layer_norm(x, residual, self.weight, self.bias, self.eps)


class BiasGELU(nn.Module):
    """``gelu(x + bias)`` over the last dimension: ``torch.nn.GELU(approximate)``
    with the bias of the layer before it folded in (``bias`` parameter, zeros
    at start)."""

    def __init__(
        self,
        dim: int,
        approximate: str = "none",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.dim = int(dim)
        self.approximate = approximate
        self.bias = nn.Parameter(torch.zeros(self.dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.bias_gelu(x, self.bias, self.approximate)

    def extra_repr(self) -> str:
        return f"{self.dim}, approximate={self.approximate!r}"


class RotaryEmbedding(nn.Module):
    """Rotary position embedding with its own cos/sin tables.

    ``forward(x)`` takes ``x`` as ``[batch, seq, heads, head_dim]`` (seq at
    most ``max_seq_len``) and rotates the first ``rotary_dim`` (default
    ``head_dim``) dims of each head, frequencies ``base ** (-2i / rotary_dim)``
    as in LLaMA; ``interleaved=True`` is the GPT-J pairing. ``cos`` and
    ``sin`` are non-persistent buffers ``[max_seq_len, rotary_dim // 2]``.
    """

    def __init__(
        self,
        head_dim: int,
        max_seq_len: int = 2048,
        base: float = 10000.0,
        interleaved: bool = False,
        rotary_dim: int | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.head_dim = int(head_dim)
        self.rotary_dim = int(rotary_dim if rotary_dim is not None else head_dim)
        if self.rotary_dim % 2 or not 0 < self.rotary_dim <= self.head_dim:
            raise ValueError(
                f"rotary_dim must be even and in (0, head_dim={self.head_dim}], "
                f"got {self.rotary_dim}"
            )
        self.max_seq_len = int(max_seq_len)
        self.base = float(base)
        self.interleaved = bool(interleaved)
        exponents = torch.arange(0, self.rotary_dim, 2, dtype=torch.float64) / self.rotary_dim
        inv_freq = self.base**-exponents
        angles = torch.outer(torch.arange(self.max_seq_len, dtype=torch.float64), inv_freq)
        dtype = dtype or torch.get_default_dtype()
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[1]
        return ops.rotary_embedding(x, self.cos[:seq], self.sin[:seq], self.interleaved)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
            f"max_seq_len={self.max_seq_len}, base={self.base}, interleaved={self.interleaved}"
        )


class NormalizeImage(nn.Module):
    """``(image / 255 - mean) / std`` per channel to ``[N, C, H, W]``, from a
    uint8 (or 0..255 float) ``[N, H, W, C]`` image (``channels_last_in=True``)
    or an ``[N, C, H, W]`` one. ``mean``/``std`` as in
    ``torchvision.transforms.Normalize`` (0..1 scale)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], channels_last_in: bool = True):
        super().__init__()
        self.mean = [float(v) for v in mean]
        self.std = [float(v) for v in std]
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean and std differ in length: {len(self.mean)} vs {len(self.std)}")
        self.channels_last_in = bool(channels_last_in)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return ops.normalize_image(image, self.mean, self.std, self.channels_last_in)

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}, channels_last_in={self.channels_last_in}"


class ImageModel(nn.Module):
    """``model(normalize_image(image))``: a vision model that takes images as
    they come (uint8 ``[N, H, W, C]`` with ``channels_last_in=True``, or 0..255
    ``[N, C, H, W]``) and normalizes them with opbridge's fused kernel in
    front. ``mean``/``std`` on the 0..1 scale, as the model was trained with
    (default for timm models: their ``pretrained_cfg["mean"]`` / ``["std"]``;
    Hugging Face: the image processor's ``image_mean`` / ``image_std``). ``input_name`` passes the
    normalized image by keyword (``"pixel_values"`` for Hugging Face
    models)."""

    def __init__(
        self,
        model: nn.Module,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        channels_last_in: bool = True,
        input_name: str | None = None,
    ):
        super().__init__()
        if mean is None or std is None:
            config = getattr(model, "pretrained_cfg", None) or {}
            mean = config.get("mean") if mean is None else mean
            std = config.get("std") if std is None else std
            if mean is None or std is None:
                raise TypeError(
                    f"opbridge.nn.ImageModel: pass mean and std: {type(model).__name__} has no "
                    "pretrained_cfg with them (timm models do)"
                )
        self.normalize = NormalizeImage(mean, std, channels_last_in)
        self.model = model
        self.input_name = input_name

    def forward(self, image: torch.Tensor):
        x = self.normalize(image)
        if self.input_name is not None:
            return self.model(**{self.input_name: x})
        return self.model(x)
