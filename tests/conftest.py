import os
import warnings
from pathlib import Path

# torch.compile caches compiled graphs (including the calls into
# torch.ops.opbridge backward ops) under one folder per user by default; the
# cache key does not cover opbridge's own schemas, so a build of another
# checkout with different schemas would hand its graphs to this one. Each
# checkout gets its own cache, beside its build.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", str(Path(__file__).resolve().parents[1] / "build" / "torchinductor")
)

import pytest
import torch

warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
