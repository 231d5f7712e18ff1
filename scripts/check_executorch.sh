#!/usr/bin/env bash
# ExecuTorch in its own environment (.venv-executorch): the executorch wheel
# and its requirements (requirements-executorch.txt; the main environment's
# torch 2.13.0, none of executorch's other requirements in the main
# environment), opbridge built there with its ExecuTorch kernel library
# (-DOPBRIDGE_BUILD_EXECUTORCH=ON: csrc/executorch_adapter, linked against
# the wheel's runtime), and tests/executorch: models with opbridge's ops
# lowered to .pte and run in ExecuTorch's runtime, against eager PyTorch.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv-executorch"
BUILD="$ROOT/build/executorch"
STAMP="$ROOT/.stamps/executorch"
log() { printf '[executorch] %s\n' "$*" >&2; }

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  python3.11 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "pip==25.3"
fi
if ! "$VENV/bin/python" scripts/check_pins.py requirements-executorch.txt >/dev/null 2>&1; then
  log "installing requirements-executorch.txt (executorch $(grep -E '^executorch==' requirements-executorch.txt | cut -d= -f3))"
  # --no-compile: modules are compiled when first imported (as in ./dev).
  "$VENV/bin/python" -m pip install -q --no-compile -r requirements-executorch.txt
  "$VENV/bin/python" scripts/check_pins.py requirements-executorch.txt
fi

want="$(git ls-files -s csrc python cmake CMakeLists.txt pyproject.toml requirements-executorch.txt | sha256sum | cut -d' ' -f1)-$(git diff HEAD -- csrc python cmake CMakeLists.txt pyproject.toml | sha256sum | cut -d' ' -f1)-$(find csrc/executorch_adapter -type f | sort | xargs cat | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]]; then
  log "building opbridge with its ExecuTorch kernel library"
  "$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps --force-reinstall . \
    -Cbuild-dir="$BUILD" -Ccmake.define.OPBRIDGE_BUILD_EXECUTORCH=ON \
    -Ccmake.define.OPBRIDGE_BUILD_OPENVINO=OFF -Ccmake.define.OPBRIDGE_WERROR=ON
  mkdir -p "$(dirname "$STAMP")"
  echo "$want" >"$STAMP"
fi
log "tests/executorch"
cd "$(mktemp -d)"
exec "$VENV/bin/python" -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -o addopts="-ra --strict-markers" \
  -p no:cacheprovider "$ROOT/tests/executorch" "$@"
