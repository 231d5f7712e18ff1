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


# Files that take minutes (user projects built from the scaffold and the
# examples, the benchmark's quick run, the C++ host): collected first, so
# that `./dev test`'s workers (a file each, `--dist loadfile`) start them
# early instead of one worker running them alone at the end.
_SLOW_FIRST = (
    "sdk/test_sdk.py",
    "sdk/test_example_fused_norm.py",
    "bench/test_bench.py",
    "runtimes/test_cpp_host.py",
)


def pytest_collection_modifyitems(config, items):
    del config
    root = Path(__file__).resolve().parent

    def rank(item) -> int:
        relative = Path(item.path).resolve().relative_to(root).as_posix()
        return _SLOW_FIRST.index(relative) if relative in _SLOW_FIRST else len(_SLOW_FIRST)

    items.sort(key=rank)
