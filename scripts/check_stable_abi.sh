#!/usr/bin/env bash
# One build on several torch releases: opbridge's wheel built on LibTorch's
# stable ABI (-DOPBRIDGE_TORCH_STABLE_ABI=ON) against the main environment's
# torch 2.13, then run unchanged under torch 2.14.1 (the timm environment's,
# scripts/check_timm.sh) by scripts/stable_abi_smoke.py: ops, autograd,
# torch.compile, torch.export and a custom-route export run in ONNX Runtime.
# The 2.14.1 environment is borrowed through a .pth file, behind the unpacked
# wheel: its own opbridge (a CUDA build of the default ABI) is not touched.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/wheel-stable"
SCRATCH="$ROOT/build/stable-venv"
TORCH_ENV="$ROOT/.venv-timm"
log() { printf '[stable-abi] %s\n' "$*" >&2; }

if [[ ! -x "$TORCH_ENV/bin/python" ]]; then
  echo "[stable-abi] needs $TORCH_ENV (torch 2.14.1): run ./dev timm first" >&2
  exit 1
fi
rm -rf "$OUT"
log "building the stable-ABI wheel against $("$ROOT/.venv/bin/python" -c 'import torch; print("torch", torch.__version__)')"
"$ROOT/.venv/bin/python" -m pip wheel -q --no-build-isolation --no-deps "$ROOT" -w "$OUT" \
  -Cbuild-dir="$ROOT/build/wheel-stable-build" -Ccmake.define.OPBRIDGE_TORCH_STABLE_ABI=ON \
  -Ccmake.define.OPBRIDGE_BUILD_OPENVINO=OFF -Ccmake.define.OPBRIDGE_WERROR=ON
wheel=("$OUT"/opbridge-*.whl)
rm -rf "$SCRATCH" && python3.11 -m venv --without-pip "$SCRATCH"
site="$("$SCRATCH/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$ROOT/.venv/bin/python" -m zipfile -e "${wheel[0]}" "$OUT/unpacked"
torch_site="$("$TORCH_ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s\n%s\n' "$OUT/unpacked" "$torch_site" >"$site/opbridge-stable-abi.pth"
log "running $(basename "${wheel[0]}") under $("$SCRATCH/bin/python" -c 'import torch; print("torch", torch.__version__)')"
cd "$(mktemp -d)"
"$SCRATCH/bin/python" "$ROOT/scripts/stable_abi_smoke.py"
