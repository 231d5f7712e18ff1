#!/usr/bin/env bash
# By hand, outside CI (it downloads each torch with its dependencies from the
# package index pip is configured with): the wheels scripts/check_stable_abi.sh
# built (opbridge's, against torch 2.13, and examples/fused_norm's, built on
# it by opbridge package-op) installed into a fresh environment per torch
# release given, by default 2.12.1 (the stable ABI's target) and 2.15.0;
# there, pip check, scripts/stable_abi_smoke.py (ops, autograd,
# torch.compile, torch.export, ONNX Runtime; the user's stable-ABI library
# and its torch symbols) and opbridge check-op my_fused_ops; then the call
# overhead of each against the build's environment
# (benchmarks/call_overhead.py, the main environment first).
#
#   bash scripts/check_wheel.sh && bash scripts/check_stable_abi.sh
#   bash scripts/check_torch_releases.sh [VERSION ...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIP=("$ROOT/.venv/bin/python" -m pip)
log() { printf '[torch-releases] %s\n' "$*" >&2; }
if [[ $# -eq 0 ]]; then set -- 2.12.1 2.15.0; fi

wheel=("$ROOT"/build/wheel/opbridge-*.whl)
user_wheel=("$ROOT"/build/wheel-stable/user/my_fused_ops-*.whl)
if [[ ! -f "${wheel[0]}" || ! -f "${user_wheel[0]}" ]]; then
  log "needs the wheels of scripts/check_wheel.sh and scripts/check_stable_abi.sh: run them first"
  exit 1
fi
pythons=(--python "$ROOT/.venv/bin/python")
for version in "$@"; do
  venv="$ROOT/build/torch-$version"
  start=$SECONDS
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$version'))" 2>/dev/null; then
    rm -rf "$venv" && python3.11 -m venv --without-pip "$venv"
    # torch at the release, everything else opbridge needs at the main
    # environment's pins (a file: pip --python runs pip again in another
    # process, which does not inherit a process substitution).
    grep -E '^(onnx|onnxruntime|onnxscript|onnx-ir|numpy|ml_dtypes|protobuf)==' "$ROOT/requirements.txt" \
      >"$venv/pins.txt"
    # The release asked for exactly, whatever cap a machine's pip constraints
    # file puts on torch.
    PIP_CONSTRAINT=/dev/null "${PIP[@]}" --python "$venv/bin/python" install -q --no-compile \
      "torch==$version" -r "$venv/pins.txt"
  fi
  "${PIP[@]}" --python "$venv/bin/python" install -q --no-compile --no-deps --force-reinstall \
    "${wheel[0]}" "${user_wheel[0]}"
  "${PIP[@]}" --python "$venv/bin/python" check
  log "torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') ready in $((SECONDS - start)) s"
  (cd "$(mktemp -d)" && "$venv/bin/python" "$ROOT/scripts/stable_abi_smoke.py" my_fused_ops &&
    "$venv/bin/opbridge" check-op my_fused_ops)
  pythons+=(--python "$venv/bin/python")
done
log "call overhead, the main environment (torch 2.13, the C++-ABI library) first"
"$ROOT/.venv/bin/python" "$ROOT/benchmarks/call_overhead.py" "${pythons[@]}"
