"""The call of every built-in operator: the one line an operator adds
outside its folder (``csrc/ops/<op>/``) and its card module
(``opbridge/ops/<op>.py``).

:mod:`opbridge.ops` and :mod:`opbridge` import every name here;
``tests/test_layout.py`` fails while an operator of ``opbridge.specs()`` is
missing.
"""

from opbridge.ops.add_layer_norm import add_layer_norm as add_layer_norm
from opbridge.ops.add_rms_norm import add_rms_norm as add_rms_norm
from opbridge.ops.bias_gelu import bias_gelu as bias_gelu
from opbridge.ops.layer_norm import layer_norm as layer_norm
from opbridge.ops.normalize_image import normalize_image as normalize_image
from opbridge.ops.rms_norm import rms_norm as rms_norm
from opbridge.ops.rotary_embedding import rotary_embedding as rotary_embedding
from opbridge.ops.scaled_clamp import scaled_clamp as scaled_clamp

# The calls, by name: what `from opbridge.ops.catalog import *` takes.
__all__ = sorted(name for name in dir() if not name.startswith("_"))
