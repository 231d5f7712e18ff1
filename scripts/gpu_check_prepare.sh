#!/usr/bin/env bash
# Fetches what scripts/gpu_check.sh needs beside the checkout on a GPU machine
# without a network: ONNX Runtime's headers (third_party/onnxruntime) and
# Highway's Debian packages (.gpu/*.deb, from this machine's apt sources).
# Carry both folders along with the checkout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/fetch_ort_headers.sh
mkdir -p .gpu
cd .gpu
rm -f ./*.deb
apt-get -o APT::Sandbox::User=root download libhwy-dev libhwy1 >/dev/null
ls -1 "$ROOT"/.gpu/*.deb
