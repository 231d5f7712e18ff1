"""AOTInductor: a model with opbridge's operators and a user's (faulty_ops's
short_gradient, whose forward is right) through torch.export with a dynamic
batch and torch._inductor.aoti_compile_and_package, run from Python
(aoti_load_package) and from a C++ host with libtorch and the libraries'
PyTorch libraries only (examples/aoti_cpp), equal to eager."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import faulty_library
import numpy as np
import pytest
import torch

import opbridge

from paths import ROOT

EXAMPLE = ROOT / "examples" / "aoti_cpp"

# In a process of its own: the user's library stays out of the test process,
# and AOTInductor's compile of the package is the process's alone.
COMPILE = """
import json, sys, numpy as np, torch, opbridge
from torch.export import Dim

folder, faulty = sys.argv[1], sys.argv[2]
user = opbridge.load_library(faulty)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)
        self.norm = opbridge.nn.RMSNorm(32)
        self.weight = torch.nn.Parameter(torch.rand(32) + 0.5)

    def forward(self, x):
        h = torch.ops.faulty_ops.short_gradient(self.norm(self.proj(x)))
        h = opbridge.scaled_clamp(h, 0.5, -1.0, 1.0)
        out, residual = opbridge.add_rms_norm(h, x, self.weight)
        return out * residual


torch.manual_seed(0)
model = Net().eval()
batch = Dim("batch", min=1, max=64)
with torch.no_grad():
    program = torch.export.export(model, (torch.randn(4, 32),), dynamic_shapes=({0: batch},))
targets = sorted({str(n.target) for n in program.graph.nodes if n.op == "call_function"})
package = torch._inductor.aoti_compile_and_package(program, package_path=folder + "/net.pt2")
loaded = torch._inductor.aoti_load_package(package)
errors = {}
with torch.no_grad():
    for n in (1, 3, 17):
        x = torch.randn(n, 32)
        errors[n] = (loaded(x) - model(x)).abs().max().item()
    x = torch.randn(7, 32)
    x.numpy().tofile(folder + "/in.bin")
    model(x).numpy().tofile(folder + "/expected.bin")
print(json.dumps({
    "targets": targets, "errors": errors, "package": package, "shape": list(x.shape),
    "libraries": [str(opbridge.libraries()[0].torch_library_path), str(user.torch_library_path)],
}))
"""


def _run(*command, cwd=None) -> str:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def _configure_and_build(build: Path) -> subprocess.Popen:
    """examples/aoti_cpp built as the guide says (find_package(Torch) and
    find_package(opbridge)), in the background."""
    ninja = shutil.which("ninja", path=str(Path(sys.executable).parent)) or shutil.which("ninja")
    generator = f'-G Ninja "-DCMAKE_MAKE_PROGRAM={ninja}"' if ninja else ""
    prefix = f"{opbridge.cmake_prefix_path()};{torch.utils.cmake_prefix_path}"
    script = textwrap.dedent(
        f"""
        set -e
        cmake -S "{EXAMPLE}" -B "{build}" {generator} "-DCMAKE_PREFIX_PATH={prefix}" >/dev/null
        cmake --build "{build}"
        """
    )
    return subprocess.Popen(
        ["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.fixture(scope="module")
def faulty() -> Path:
    """The user's library (its extension module), built once for the tests that need one."""
    return faulty_library.build()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, faulty):
    """The package compiled (and run from Python) while the C++ host builds."""
    folder = tmp_path_factory.mktemp("aoti")
    host = _configure_and_build(folder / "host")
    try:
        out = _run(sys.executable, "-c", COMPILE, folder, faulty)
    finally:
        log, _ = host.communicate(timeout=900)
    assert host.returncode == 0, log[-4000:]
    return folder, folder / "host" / "aoti_run", json.loads(out.strip().splitlines()[-1])


def test_the_exported_graph_calls_the_libraries_operators(compiled):
    _, _, result = compiled
    for op in ("opbridge.rms_norm", "opbridge.scaled_clamp", "opbridge.add_rms_norm"):
        assert f"{op}.default" in result["targets"], result["targets"]
    assert "faulty_ops.short_gradient.default" in result["targets"], result["targets"]


def test_the_package_runs_from_python_at_every_batch_equal_to_eager(compiled):
    _, _, result = compiled
    assert sorted(map(int, result["errors"])) == [1, 3, 17]
    for batch, error in result["errors"].items():
        assert error <= 1e-5, f"batch {batch}: max |aoti - eager| = {error}"


def test_the_package_runs_in_a_cpp_host_without_python_equal_to_eager(compiled):
    folder, host, result = compiled
    opbridge_library, user_library = result["libraries"]
    linked = _run("ldd", host)
    assert "libopbridge_torch.so" in linked and "libpython" not in linked, linked
    out = _run(
        host,
        result["package"],
        folder / "in.bin",
        folder / "out.bin",
        *result["shape"],
        "--library",
        user_library,
    )
    assert f"output shape: {' '.join(map(str, result['shape']))}" in out, out
    got = np.fromfile(folder / "out.bin", dtype=np.float32)
    expected = np.fromfile(folder / "expected.bin", dtype=np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # Without the user's library its operator is unknown to the package: a
    # clear error, not a crash.
    command = [host, result["package"], folder / "in.bin", folder / "none.bin", *result["shape"]]
    result_without = subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
    )
    assert result_without.returncode == 1, result_without.stdout + result_without.stderr
    assert "faulty_ops::short_gradient" in result_without.stderr, result_without.stderr
    assert Path(opbridge_library).is_file()


def test_a_module_without_its_pytorch_library_beside_it_is_refused_naming_the_file(
    faulty, tmp_path
):
    # The extension module is a thin layer: its kernels and registrations
    # are in lib<name>_torch_kernels.so, which it loads from its own folder.
    alone = tmp_path / faulty.name
    shutil.copyfile(faulty, alone)
    code = f"import opbridge\nopbridge.load_library({str(alone)!r})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"could not load its PyTorch library {tmp_path / 'libfaulty_ops_torch_kernels.so'}" in (
        result.stderr
    ), result.stderr
