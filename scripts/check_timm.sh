#!/usr/bin/env bash
# timm models through opbridge.patch, in their own environment (.venv-timm):
# timm imports torchvision, and the torchvision wheel on these machines that
# imports on the CPU pairs with torch 2.14.1 (a CUDA build, run on the CPU
# here), while the main environment pins torch 2.13.0. So this environment
# pins torch 2.14.1 + torchvision 0.29.1 + timm (requirements-timm.txt),
# builds opbridge against that torch, and runs tests/timm there. It doubles
# as a check that opbridge builds and runs on the next torch release, and,
# since that torch is a CUDA build, as the CUDA build's check: opbridge is
# built here with OPBRIDGE_CUDA=ON (every kernel.cu compiled by the machine's
# nvcc, the PyTorch adapter's CUDA dispatch and the ONNX Runtime library's
# CUDA execution-provider ops compiled and linked), and
# tests/timm/test_cuda_build.py checks what can be checked without a GPU.
# The kernels are compiled for one architecture, OPBRIDGE_CHECK_CUDA_ARCHS
# (default 80, the oldest the build supports): the source is the same for
# every architecture, and each one more costs minutes of nvcc on two cores.
set -euo pipefail
CUDA_ARCHS="${OPBRIDGE_CHECK_CUDA_ARCHS:-80}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv-timm"
BUILD="$ROOT/build/timm"
STAMP="$ROOT/.stamps/timm"
log() { printf '[timm] %s\n' "$*" >&2; }

# --prepare: only the environment (downloads and unpacking, no build), which
# ./dev test makes in the background while it compiles.
PREPARE=0
if [[ "${1:-}" == --prepare ]]; then
  PREPARE=1
  shift
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  python3.11 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "pip==25.3"
fi
if ! "$VENV/bin/python" scripts/check_pins.py requirements-timm.txt >/dev/null 2>&1; then
  log "installing requirements-timm.txt (torch $(grep -E '^torch==' requirements-timm.txt | cut -d= -f3))"
  # --no-compile: modules are compiled when first imported (as in ./dev).
  "$VENV/bin/python" -m pip install -q --no-compile -r requirements-timm.txt
  "$VENV/bin/python" scripts/check_pins.py requirements-timm.txt
fi
((PREPARE)) && exit 0

# The CUDA build of torch asks CMake for the CUDA toolkit even for CPU code:
# $CUDA_HOME, else the one nvcc runs from (nvcc may be a wrapper script).
cuda_root="${CUDA_HOME:-}"
if [[ -z "$cuda_root" ]] && command -v nvcc >/dev/null; then
  here="$(nvcc --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -1)"
  [[ -n "$here" ]] && cuda_root="$(dirname "$here")"
fi
if [[ -z "$cuda_root" || ! -d "$cuda_root/include" ]]; then
  echo "[timm] needs the CUDA toolkit to build against torch's CUDA build: set CUDA_HOME or put nvcc on PATH" >&2
  exit 1
fi
# A test build: the CPU kernels for two SIMD targets (SCALAR, AVX2), not all
# five (cmake/opbridge.cmake, OPBRIDGE_HWY_DISABLED_TARGETS); the main build
# and the wheel have them all.
HWY_DISABLED="HWY_SSSE3|HWY_SSE4|HWY_AVX3"
want="$(git ls-files -s csrc python cmake CMakeLists.txt pyproject.toml requirements-timm.txt | sha256sum | cut -d' ' -f1)-$CUDA_ARCHS-$HWY_DISABLED-$(git diff HEAD -- csrc python cmake CMakeLists.txt pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]]; then
  log "building opbridge against $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)')"
  "$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps --force-reinstall . \
    -Cbuild-dir="$BUILD" -Ccmake.define.CUDA_TOOLKIT_ROOT_DIR="$cuda_root" \
    -Ccmake.define.CMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" -Ccmake.define.OPBRIDGE_CUDA=ON \
    -Ccmake.define.CMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" \
    -Ccmake.define.OPBRIDGE_HWY_DISABLED_TARGETS="$HWY_DISABLED" \
    -Ccmake.define.OPBRIDGE_WERROR=ON
  mkdir -p "$(dirname "$STAMP")"
  echo "$want" >"$STAMP"
fi
log "tests/timm"
cd "$(mktemp -d)"
exec "$VENV/bin/python" -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -o addopts="-ra --strict-markers" "$ROOT/tests/timm" "$@"
