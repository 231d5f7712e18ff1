#!/usr/bin/env bash
# Builds the wheel, installs it into a scratch virtual environment (the pinned
# runtime dependencies, nothing from the build tree) and runs it there from
# outside the checkout: a PyTorch call, a custom-route export and ONNX Runtime
# with the wheel's library, which must find Highway inside the wheel, and a
# program run by ExecuTorch on the wheel's ExecuTorch kernels.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
OUT="$ROOT/build/wheel"
SCRATCH="$ROOT/build/wheel-venv"
# The scratch environment: the runtime dependencies at their pins (torch,
# onnx, onnxruntime, onnxscript, numpy and what they pull; byte-compiled when
# first imported), and ExecuTorch as ./dev installs it
# (requirements-nodeps.txt, --no-deps): the wheel's ExecuTorch kernels find
# its runtime through their RUNPATH. `--prepare` makes only this (no build),
# as ./dev test does in the background while it compiles.
prepare() {
  if [[ ! -x "$SCRATCH/bin/python" ]]; then
    python3.11 -m venv "$SCRATCH"
  fi
  "$SCRATCH/bin/python" -m pip install -q --no-compile -r <(grep -E '^(torch|onnx|onnxruntime|onnxscript|onnx-ir|numpy|ml_dtypes|protobuf|typing_extensions|packaging|filelock|fsspec|Jinja2|MarkupSafe|networkx|sympy|mpmath|flatbuffers)==' "$ROOT/requirements.txt")
  "$SCRATCH/bin/python" -m pip install -q --no-compile --no-deps -r "$ROOT/requirements-nodeps.txt"
}
if [[ "${1:-}" == --prepare ]]; then
  prepare
  exit 0
fi
rm -rf "$OUT"
# Warnings as errors, as in every CI build; it also makes the compile commands
# those of ./dev's build, so ccache serves most of them.
"$VENV/bin/python" -m pip wheel -q --no-build-isolation --no-deps "$ROOT" -w "$OUT" \
  -Cbuild-dir="$ROOT/build/wheel-build" -Ccmake.define.OPBRIDGE_WERROR=ON \
  -Ccmake.define.OPBRIDGE_BUILD_EXECUTORCH=ON
wheel=("$OUT"/opbridge-*.whl)
echo "[check_wheel] built $(basename "${wheel[0]}") ($(du -h "${wheel[0]}" | cut -f1))" >&2
prepare
"$SCRATCH/bin/python" -m pip install -q --force-reinstall --no-deps "${wheel[0]}"
cd "$(mktemp -d)"
OPBRIDGE_WHEEL="${wheel[0]}" "$SCRATCH/bin/python" - <<'PY'
import os, subprocess, sys

import numpy as np
import torch

import opbridge

site = os.path.dirname(opbridge.__file__)
assert site.startswith(sys.prefix), f"opbridge imported from {site}, not the scratch environment"
library = opbridge.runtimes.onnxruntime.get_library_path()
linked = subprocess.run(["ldd", library], capture_output=True, text=True, check=True).stdout
hwy = [line for line in linked.splitlines() if "libhwy" in line]
assert hwy and all(site in line for line in hwy), f"Highway not taken from the wheel: {hwy}"
# Every library of the package finds what it needs beyond the system's base
# (opbridge.sdk.package.BASE_LIBRARIES) inside the scratch environment:
# in the package itself ($ORIGIN) or in the wheels it depends on (torch,
# onnxruntime, openvino), never in the system's library folders.
import glob
import importlib.util

from opbridge.sdk.package import inspect_wheel, is_base_library

for shared in sorted(glob.glob(os.path.join(site, "*.so*"))):
    if "openvino" in os.path.basename(shared) and importlib.util.find_spec("openvino") is None:
        continue  # the OpenVINO adapter needs the openvino wheel, not installed here
    out = subprocess.run(["ldd", shared], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "=>" not in line:
            continue
        name, target = line.split()[0], line.split("=>")[1].split()[0]
        if is_base_library(name):
            continue
        assert target.startswith(sys.prefix), (
            f"{os.path.basename(shared)} needs {name}, found outside the wheel and its "
            f"dependencies: {target}"
        )

# What opbridge package-op checks of a user's wheel holds for opbridge's own:
# every library's needs carried or provided, RUNPATHs relative to $ORIGIN.
report = inspect_wheel(os.environ["OPBRIDGE_WHEEL"])
assert not report.problems, report.problems
print(report.table())

# The PyTorch library (for C++ hosts, docs/guides/pytorch-native.md) is in
# the wheel, beside the extension module that loads it, and needs no Python.
torch_library = opbridge.libraries()[0].torch_library_path
assert torch_library.is_file() and str(torch_library).startswith(site), torch_library
undefined = subprocess.run(["nm", "-D", "-u", str(torch_library)], capture_output=True, text=True, check=True).stdout
python_symbols = [line.split()[-1] for line in undefined.splitlines() if line.split()[-1].startswith("Py")]
assert not python_symbols, f"{torch_library.name} needs Python: {python_symbols[:5]}"
# Both PyTorch libraries are in the wheel; under the torch it was built
# with, the default-ABI one is loaded (scripts/check_stable_abi.sh runs the
# same wheel under another torch, on the stable one).
adapter = opbridge.libraries()[0].torch_adapter
names = [path.name for path in adapter.available]
assert adapter.kind == "default" and names == ["libopbridge_torch.so", "libopbridge_torch_stable.so"], adapter
assert all(path.is_file() and str(path).startswith(site) for path in adapter.available), adapter

x, w = torch.randn(4, 64), torch.rand(64) + 0.5
y = opbridge.rms_norm(x, w)
torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
model = opbridge.nn.RMSNorm(64).eval()
proto = opbridge.export.export(model, (x,), route="custom", verbose=False)
session = opbridge.runtimes.onnxruntime.InferenceSession(proto)
(got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
# The wheel's ExecuTorch kernels, registered with the executorch package's
# runtime, run a program lowered here.
from opbridge.deploy import executorch

assert "opbridge::rms_norm.out" in executorch.load_kernels()
(lowered,) = executorch.run_pte(executorch.to_pte(model, (x,), "rms_norm.pte"), (x,))
torch.testing.assert_close(lowered, model(x).detach(), rtol=1e-5, atol=1e-5)
# The scaffold's templates are files of the package: the wheel must carry them.
from opbridge.sdk import scaffold

project = scaffold.files("soft_cap", "soft_cap_ops", "com.example.soft_cap_ops")
assert "kSoftCapSpec" in project["csrc/soft_cap/spec.h"], sorted(project)
print(f"[check_wheel] opbridge {opbridge.__version__} from {site}: torch op, custom-route "
      f"export, ONNX Runtime and ExecuTorch run; Highway from the wheel ({hwy[0].split()[0]})")
PY
