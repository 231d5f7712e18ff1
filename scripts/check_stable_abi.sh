#!/usr/bin/env bash
# One wheel on several torch releases: opbridge's wheel as scripts/check_wheel.sh
# built it against the main environment's torch 2.13 (both PyTorch libraries:
# lib<name>_torch.so and lib<name>_torch_stable.so), run unchanged under
# torch 2.14.1 (the timm environment's, scripts/check_timm.sh), where its
# extension module loads the stable-ABI library, by scripts/stable_abi_smoke.py:
# ops, autograd, torch.compile, torch.export and a custom-route export run in
# ONNX Runtime, each stable library's torch symbols checked against the stable
# C headers (opbridge.sdk.abi). A user's package, examples/fused_norm, is
# shipped as the shipping guide (docs/guides/shipping.md) ships it: its wheel
# built by `opbridge package-op` on opbridge's wheel against torch 2.13 (its
# kernels for two SIMD targets as in the timm build), where it loads its
# default-ABI library; then both wheels installed into a fresh environment
# with torch 2.14.1, where `pip check` passes, it loads its stable-ABI
# library and `opbridge check-op` runs the SDK's checks of its ops
# (reference, opcheck, gradcheck, torch.compile, custom route in ONNX
# Runtime). torch 2.14.1 and the build side's packages are borrowed through
# .pth files: the 2.14.1 environment's own opbridge (a CUDA build of the
# default ABI) and the main one's are not touched.
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
log "building $(basename "$USER_PROJECT") on the wheel against torch 2.13 (opbridge package-op)"
start=$SECONDS
# The SDK used is the wheel's (package-op passes its opbridge_DIR), not the
# main environment's opbridge, whose site-packages scikit-build-core also
# puts on CMake's search path. Without OpenVINO's package the project builds
# no OpenVINO library (not needed here, and the slowest to compile).
OPBRIDGE_HWY_DISABLED_TARGETS="HWY_SSSE3|HWY_SSE4|HWY_AVX3" "$BUILD_ENV/bin/python" -m opbridge package-op \
  "$USER_PROJECT" -o "$OUT/user" --build-dir "$ROOT/build/stable-user-build" \
  -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_OpenVINO=ON
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

# A fresh environment with torch 2.14.1 where both wheels are installed as a
# user installs them; pip check: their requirements (opbridge==0.1.0,
# torch>=2.12.0, ...) hold there. torch and the rest are borrowed from the
# timm environment through a .pth file naming a folder of links to its
# site-packages, less its own opbridge.
rm -rf "$SCRATCH" "$SCRATCH-site" && python3.11 -m venv --without-pip "$SCRATCH" && mkdir "$SCRATCH-site"
for entry in "$(purelib "$TORCH_ENV/bin/python")"/*; do
  case "$(basename "$entry")" in
    opbridge* | _opbridge* | __editable__* | *.pth) ;;
    *) ln -s "$entry" "$SCRATCH-site/" ;;
  esac
done
printf '%s\n' "$SCRATCH-site" >"$(purelib "$SCRATCH/bin/python")/opbridge-torch.pth"
"$ROOT/.venv/bin/python" -m pip --python "$SCRATCH/bin/python" install -q --no-index --no-deps --no-compile \
  "${wheel[0]}" "${user_wheel[0]}"
"$ROOT/.venv/bin/python" -m pip --python "$SCRATCH/bin/python" check
log "running $(basename "${wheel[0]}") and $(basename "${user_wheel[0]}") under $("$SCRATCH/bin/python" -c 'import torch; print("torch", torch.__version__)')"
cd "$(mktemp -d)"
"$SCRATCH/bin/python" "$ROOT/scripts/stable_abi_smoke.py" my_fused_ops
# The SDK's checks of each of the user's ops, as the shipping guide runs them.
"$SCRATCH/bin/opbridge" check-op my_fused_ops
