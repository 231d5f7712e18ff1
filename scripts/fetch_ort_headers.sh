#!/usr/bin/env bash
# Fetches the ONNX Runtime C/C++ headers (Debian trixie's libonnxruntime-dev)
# into third_party/onnxruntime without touching the system's apt state.
# The headers are not shipped in the onnxruntime wheel; the custom-op library
# only needs them (it never links libonnxruntime). The installed SDK carries
# them for user libraries and C++ hosts (opbridge::onnxruntime).
#
# 1.21 (ORT_API_VERSION 21), below the 1.24 floor, on purpose: a program asks
# ONNX Runtime for its headers' API version, and every newer release serves
# it (ONNX Runtime only appends to its API table), so what is built with
# these runs on every supported release; headers newer than the floor would
# not (1.30's get no API from 1.24 to 1.29). The custom-op library asks for
# the floor's version itself (csrc/opbridge/version.h). Debian's are the
# newest packaged headers not above the floor (docs/guides/cpp-host.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/third_party/onnxruntime"
PKG_VERSION="1.21.0+dfsg-1"
STAMP="$DEST/.version"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$PKG_VERSION" && -f "$DEST/usr/include/onnxruntime/onnxruntime_c_api.h" ]]; then
  exit 0
fi

# The Debian mirror this machine's apt already uses (deb822 .sources files or
# the one-line sources.list format): the first archive that is not a security
# or ports archive. Its trixie suite holds the headers.
debian_mirror() {
  local file uri
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$file" ]] || continue
    while read -r uri; do
      [[ "$uri" == *security* ]] || { echo "$uri"; return 0; }
    done < <(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' "$file")
  done
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$file" ]] || continue
    while read -r uri; do
      [[ "$uri" == *security* ]] || { echo "$uri"; return 0; }
    done < <(sed -E 's/\[[^]]*\]//' "$file" | awk '$1 == "deb" { print $2 }')
  done
  return 1
}

MIRROR="${OPBRIDGE_DEBIAN_MIRROR:-$(debian_mirror || true)}"
if [[ -z "$MIRROR" ]]; then
  echo "fetch_ort_headers: no Debian mirror found in /etc/apt/sources.list{,.d/*}; set OPBRIDGE_DEBIAN_MIRROR" >&2
  exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/etc"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie main" >"$WORK/etc/trixie.list"
APT_OPTS=(
  -o "Dir::Etc::SourceList=$WORK/etc/trixie.list"
  -o "Dir::Etc::SourceParts=/nonexistent"
  -o "Dir::State::Lists=$WORK/lists"
  -o "Dir::Cache=$WORK/cache"
  -o "Debug::NoLocking=1"
  -o "APT::Sandbox::User=root"
)
apt-get "${APT_OPTS[@]}" -qq update
(cd "$WORK" && apt-get "${APT_OPTS[@]}" -qq download "libonnxruntime-dev=$PKG_VERSION")
rm -rf "$DEST"
mkdir -p "$DEST"
dpkg -x "$WORK"/libonnxruntime-dev_*.deb "$DEST"
echo "$PKG_VERSION" >"$STAMP"
echo "ONNX Runtime headers $PKG_VERSION in $DEST"
