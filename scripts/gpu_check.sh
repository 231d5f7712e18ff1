#!/usr/bin/env bash
# The GPU check, as one script for a machine with a GPU, nvcc, CMake, Ninja
# and a CUDA build of torch (no network needed):
#   1. builds opbridge with OPBRIDGE_CUDA=ON against that torch (build/gpu);
#   2. runs tests/gpu: every op against the CPU kernels and a float64
#      reference, every dtype, odd sizes and long rows, forward and backward,
#      determinism, opcheck, gradcheck and torch.compile on CUDA tensors;
#   3. runs benchmarks/gpu_bench.py: each op at a DRAM-sized shape against
#      eager PyTorch and torch.compile, as a share of the measured copy
#      bandwidth.
# It writes build.log, tests.log, junit.xml, gpu_bench.json and gpu_bench.md
# to the folder given (default out/gpu) and exits with the tests' status.
#
# Beside the checkout it needs ONNX Runtime's headers in
# third_party/onnxruntime and Highway, installed or as Debian packages in
# .gpu/: scripts/gpu_check_prepare.sh fetches both on a machine with a
# network; carry both folders to the GPU machine.
#
#   scripts/gpu_check.sh [--build-only] [OUT_DIR]    (PYTHON=python3, CUDA_ARCHS=<from the GPU>)
#
# --build-only stops after the build and needs no GPU (CUDA_ARCHS, default
# 90): a rehearsal of step 1 on a machine without one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
build_only=0
if [[ "${1:-}" == "--build-only" ]]; then
  build_only=1
  shift
fi
OUT_DIR="${1:-$ROOT/out/gpu}"
mkdir -p "$OUT_DIR"
PY="$(command -v "${PYTHON:-python3}")"
BUILD="$ROOT/build/gpu"
log() { printf '[gpu_check] %s\n' "$*" >&2; }
start=$SECONDS

if ((build_only)); then
  arch="${CUDA_ARCHS:-90}"
  log "$("$PY" -c 'import torch; print("build only | torch", torch.__version__, "| CUDA", torch.version.cuda)')"
else
  arch="$("$PY" - <<'PYEOF'
import torch
if not torch.cuda.is_available() or not torch.version.cuda:
    raise SystemExit(f"gpu_check: torch {torch.__version__} sees no CUDA device")
major, minor = torch.cuda.get_device_capability()
print(f"{major}{minor}")
PYEOF
)"
  log "$("$PY" -c 'import torch; print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| CUDA", torch.version.cuda)')"
fi
log "$(nvcc --version | tail -1)"

if [[ ! -f third_party/onnxruntime/usr/include/onnxruntime/onnxruntime_c_api.h ]]; then
  bash scripts/fetch_ort_headers.sh
fi
hwy_args=()
if [[ ! -f /usr/include/hwy/highway.h ]]; then
  shopt -s nullglob
  debs=(.gpu/*.deb)
  if ((${#debs[@]} == 0)); then
    echo "gpu_check: Highway is not installed and .gpu/ holds no packages (scripts/gpu_check_prepare.sh)" >&2
    exit 1
  fi
  deps=/tmp/opbridge-gpu-deps
  rm -rf "$deps"
  for deb in "${debs[@]}"; do dpkg -x "$deb" "$deps"; done
  hwy_args=(-Dhwy_DIR="$deps/usr/lib/x86_64-linux-gnu/cmake/hwy")
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

log "building with OPBRIDGE_CUDA=ON for sm_$arch"
set -o pipefail
{
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPBRIDGE_CUDA=ON -DOPBRIDGE_WERROR=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-$arch}" -DPython3_EXECUTABLE="$PY" "${hwy_args[@]}"
  cmake --build "$BUILD" -j "$(nproc)"
} 2>&1 | tee "$OUT_DIR/build.log"
log "built in $((SECONDS - start)) s"
if ((build_only)); then
  exit 0
fi

# A package tree: the Python sources and the libraries just built.
stage="$BUILD/stage"
rm -rf "$stage"
mkdir -p "$stage"
cp -r python/opbridge "$stage/"
cp "$BUILD"/_C*.so "$BUILD"/libopbridge_torch.so "$BUILD"/libopbridge_ort.so "$stage/opbridge/"
export PYTHONPATH="$stage"
export TORCHINDUCTOR_CACHE_DIR="$BUILD/torchinductor"

log "tests/gpu"
status=0
"$PY" -m pytest -c pyproject.toml --rootdir "$ROOT" -o addopts="-ra" -p no:cacheprovider -q \
  --junitxml="$OUT_DIR/junit.xml" tests/gpu 2>&1 | tee "$OUT_DIR/tests.log" || status=$?
log "tests finished in $((SECONDS - start)) s (status $status)"

log "benchmarks/gpu_bench.py"
"$PY" benchmarks/gpu_bench.py --json "$OUT_DIR/gpu_bench.json" --markdown "$OUT_DIR/gpu_bench.md" 2>&1 |
  tee "$OUT_DIR/bench.log" || status=$((status ? status : 1))
log "done in $((SECONDS - start)) s"
exit "$status"
