#!/usr/bin/env bash
# The full benchmark suite behind `opbridge bench`: every operator and the
# demo model, sizes small / cache-resident / DRAM-sized (>= 4x the last-level
# cache), 1 thread and all threads, forward and forward+backward, and the
# end-to-end models, against every alternative. Writes
# results/<name>.{json,md,png}.
#   benchmarks/run.sh [name] [extra `opbridge bench` arguments]
#   benchmarks/run.sh models --models --threads 2   # the end-to-end models only
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${1:-latest}"
shift || true
OUT="$ROOT/benchmarks/results"
mkdir -p "$OUT"
"$ROOT/dev" setup
exec "$ROOT/.venv/bin/python" -m opbridge bench \
  --json "$OUT/$NAME.json" --markdown "$OUT/$NAME.md" --plot "$OUT/$NAME.png" "$@"
