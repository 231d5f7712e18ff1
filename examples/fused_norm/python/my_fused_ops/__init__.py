"""my_fused_ops: the articles' fused_norm, swiglu_clamp and softmax_lse, and
gated_rope and pairwise_dot (all written with the SDK's
kernel toolkit), built with the opbridge SDK.

Importing the package loads the library: torch.ops.myops.fused_norm,
torch.ops.myops.swiglu_clamp, torch.ops.myops.softmax_lse,
torch.ops.myops.gated_rope and torch.ops.myops.pairwise_dot in PyTorch and
ONNX domain "com.example.myops" for ONNX Runtime (opbridge.runtimes.onnxruntime.InferenceSession
registers it for models that use it).
"""

import opbridge
from my_fused_ops import my_fused_ops_torch as _native

LIBRARY = opbridge.load_library(_native)

from my_fused_ops.functional import CARD, FusedNorm, fused_norm  # noqa: E402
from my_fused_ops.interaction import CARD as PAIRWISE_DOT_CARD  # noqa: E402
from my_fused_ops.interaction import pairwise_dot  # noqa: E402
from my_fused_ops.rope import CARD as GATED_ROPE_CARD  # noqa: E402
from my_fused_ops.rope import gated_rope  # noqa: E402
from my_fused_ops.softmax import CARD as SOFTMAX_LSE_CARD  # noqa: E402
from my_fused_ops.softmax import softmax_lse  # noqa: E402
from my_fused_ops.swiglu import CARD as SWIGLU_CLAMP_CARD  # noqa: E402
from my_fused_ops.swiglu import swiglu_clamp  # noqa: E402

__all__ = [
    "CARD",
    "GATED_ROPE_CARD",
    "LIBRARY",
    "PAIRWISE_DOT_CARD",
    "SOFTMAX_LSE_CARD",
    "SWIGLU_CLAMP_CARD",
    "FusedNorm",
    "fused_norm",
    "gated_rope",
    "pairwise_dot",
    "softmax_lse",
    "swiglu_clamp",
]
