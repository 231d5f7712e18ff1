import os
import warnings
from pathlib import Path

# torch.compile's on-disk caches are keyed by the graph, not by a custom op's
# schema: code compiled against another checkout's (or an older build's)
# operators would be reused. Each checkout's tests keep their own.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", str(Path(__file__).resolve().parents[1] / "build" / "torchinductor")
)

import pytest
import torch

warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)

# Under pytest-xdist (`./dev test` runs one worker per core), each worker
# keeps to one intra-op thread, so workers do not spin-wait on each other's
# cores. Tests of thread counts set their own.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
