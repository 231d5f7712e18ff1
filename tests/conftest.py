import os
import warnings
from pathlib import Path

# torch.compile's on-disk caches are keyed by the graph, not by a custom op's
# schema: code compiled against another checkout's (or an older build's)
# operators would be reused. Each checkout's tests keep their own.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", str(Path(__file__).resolve().parents[1] / "build" / "torchinductor")
)

# Users' libraries built by the tests (the scaffold's project, the examples,
# opbridge.sdk.build.load) compile their kernels for two SIMD targets, SCALAR and
# AVX2, not all five: a fraction of the compile time, and both dispatch
# paths still run. opbridge's own library, built by ./dev, has every target,
# and its C++ tests force each one in turn.
os.environ.setdefault("OPBRIDGE_HWY_DISABLED_TARGETS", "HWY_SSSE3|HWY_SSE4|HWY_AVX3")

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
# examples, the Hugging Face models, the benchmark's quick run, the demo, the
# C++ host), longest first: collected first, so that `./dev test`'s workers
# (a file each, `--dist loadfile --no-loadscope-reorder`, which keeps this
# order) start them early instead of one worker running them alone at the end.
# Seconds on 2 cores, with an empty compiler cache where it differs: sdk
# 300 (580), hf 205, routes 165, fused_norm 75 (130), openvino 116,
# onnx_export 103, faulty_ops 50 (90), integer_inputs 100, demo 73, opsets
# 44, verify_reference 40.
_SLOW_FIRST = (
    "sdk/test_sdk.py",
    "integrations/test_hf.py",
    "autoroute/test_routes.py",
    "sdk/test_example_fused_norm.py",
    "runtimes/test_openvino.py",
    "export/test_onnx_export.py",
    "sdk/test_faulty_ops.py",
    "runtimes/test_integer_inputs.py",
    "demo/test_demo.py",
    "export/test_opsets.py",
    "verify/test_verify_reference.py",
    "distributed/test_distributed.py",
)


def pytest_collection_modifyitems(config, items):
    del config
    root = Path(__file__).resolve().parent

    def rank(item) -> int:
        relative = Path(item.path).resolve().relative_to(root).as_posix()
        return _SLOW_FIRST.index(relative) if relative in _SLOW_FIRST else len(_SLOW_FIRST)

    items.sort(key=rank)


# The time of each test file (setup, call and teardown of its tests), summed
# where the reports arrive (the controller under xdist): the ten longest are
# printed at the end, to keep _SLOW_FIRST in step with the suite.
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    longest = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])[:10]
    terminalreporter.section("longest test files (s)")
    for path, seconds in longest:
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")
