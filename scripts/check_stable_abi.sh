#!/usr/bin/env bash
# One wheel on several torch releases: opbridge's wheel as scripts/check_wheel.sh
# built it against the main environment's torch 2.13 (both PyTorch libraries:
# lib<name>_torch.so and lib<name>_torch_stable.so), run unchanged under
# torch 2.14.1 (the timm environment's, scripts/check_timm.sh), where its
# extension module loads the stable-ABI library, by scripts/stable_abi_smoke.py:
# ops, autograd, torch.compile, torch.export and a custom-route export run in
# ONNX Runtime, each stable library's torch symbols checked against the stable
# C headers (opbridge.sdk.abi). A user's package built through the SDK on that
# wheel, against torch 2.13 (examples/fused_norm, its kernels for two SIMD
# targets as in the timm build), loads its default-ABI library there and its
# stable-ABI one under 2.14.1, which runs the SDK's checks of its ops
# (reference, opcheck, gradcheck, torch.compile). The environments are
# borrowed through .pth files, behind the unpacked wheels: the 2.14.1
# environment's own opbridge (a CUDA build of the default ABI) and the main
# one's are not touched.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="$ROOT/build/wheel"
OUT="$ROOT/build/wheel-stable"
SCRATCH="$ROOT/build/stable-venv"
BUILD_ENV="$ROOT/build/stable-build-venv"
USER_PROJECT="$ROOT/examples/fused_norm"
TORCH_ENV="$ROOT/.venv-timm"
log() { printf '[stable-abi] %s\n' "$*" >&2; }

if [[ ! -x "$TORCH_ENV/bin/python" ]]; then
  echo "[stable-abi] needs $TORCH_ENV (torch 2.14.1): run ./dev timm first" >&2
  exit 1
fi
wheel=("$WHEELS"/opbridge-*.whl)
if [[ ! -f "${wheel[0]}" ]]; then
  echo "[stable-abi] needs the wheel of scripts/check_wheel.sh in $WHEELS: run it first" >&2
  exit 1
fi
rm -rf "$OUT" && mkdir -p "$OUT"
log "$(basename "${wheel[0]}") (built by scripts/check_wheel.sh)"
"$ROOT/.venv/bin/python" -m zipfile -e "${wheel[0]}" "$OUT/unpacked"
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# A scratch venv that sees the paths given, in order (unpacked wheels, then
# the site-packages of an environment with torch).
environment() {
  local venv="$1"
  shift
  rm -rf "$venv" && python3.11 -m venv --without-pip "$venv"
  printf '%s\n' "$@" >"$(purelib "$venv/bin/python")/opbridge-stable-abi.pth"
}

environment "$BUILD_ENV" "$OUT/unpacked" "$(purelib "$ROOT/.venv/bin/python")"
log "building $(basename "$USER_PROJECT") on the wheel against torch 2.13"
start=$SECONDS
# opbridge_DIR: the SDK of the wheel, not the main environment's opbridge,
# whose site-packages scikit-build-core also puts on CMake's search path.
# Without OpenVINO's package the project builds no OpenVINO library (not
# needed here, and the slowest to compile).
OPBRIDGE_HWY_DISABLED_TARGETS="HWY_SSSE3|HWY_SSE4|HWY_AVX3" "$BUILD_ENV/bin/python" -m pip wheel -q \
  --no-build-isolation --no-deps "$USER_PROJECT" -w "$OUT/user" -Cbuild-dir="$ROOT/build/stable-user-build" \
  -Ccmake.define.opbridge_DIR="$OUT/unpacked/opbridge/share/cmake/opbridge" \
  -Ccmake.define.CMAKE_DISABLE_FIND_PACKAGE_OpenVINO=ON
user_wheel=("$OUT"/user/*.whl)
"$ROOT/.venv/bin/python" -m zipfile -e "${user_wheel[0]}" "$OUT/user/unpacked"
log "built $(basename "${user_wheel[0]}") in $((SECONDS - start)) s"
environment "$BUILD_ENV" "$OUT/unpacked" "$OUT/user/unpacked" "$(purelib "$ROOT/.venv/bin/python")"
(cd "$(mktemp -d)" && "$BUILD_ENV/bin/python" - <<'PY'
import torch

import my_fused_ops
import opbridge

for library in (opbridge.libraries()[0], my_fused_ops.LIBRARY):
    adapter = library.torch_adapter
    names = [path.name for path in adapter.available]
    assert adapter.kind == "default" and len(names) == 2, (library.name, adapter)
    print(f"[stable-abi] torch {torch.__version__}: {library.name} loads {adapter.library.name} "
          f"of {names}: {adapter.reason}")
PY
)

environment "$SCRATCH" "$OUT/unpacked" "$OUT/user/unpacked" "$(purelib "$TORCH_ENV/bin/python")"
log "running $(basename "${wheel[0]}") and $(basename "${user_wheel[0]}") under $("$SCRATCH/bin/python" -c 'import torch; print("torch", torch.__version__)')"
cd "$(mktemp -d)"
"$SCRATCH/bin/python" "$ROOT/scripts/stable_abi_smoke.py" my_fused_ops
