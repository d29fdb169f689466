#!/usr/bin/env bash
# Build (once, cached outside the repo) an isolated venv with the real SGLang for CPU.
# Usage: scripts/build-engine-env.sh [VENV_DIR]   (default: $EAGLE3SCOPE_CACHE/venv-sglang-$SGLANG_VERSION)
#   SGLANG_VERSION=0.5.23 (default) or 0.5.10; pins in scripts/engine-requirements-$SGLANG_VERSION.txt.
#   EAGLE3SCOPE_REBUILD=1 deletes the venv first; otherwise a stale venv is brought in line in place,
#   so that a venv in use by a running server is never missing.
#   EAGLE3SCOPE_TORCH_FROM=DIR_OR_URL takes torch from that wheel directory or index (scripts/install-torch.sh;
#   by default the PyTorch CPU wheel index when reachable, else the package index's torch).
# Into the venv go: CPU torch, sglang --no-deps, the pinned needs,
# cpu_engine/ (pure-PyTorch sgl_kernel, AMX platform plugin, torchvision stand-in) and this project,
# the last two editable.
set -euo pipefail
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}"
VENV="${1:-$CACHE/venv-sglang-$SGLANG_VERSION}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STAMP="$VENV/.eagle3scope-built"
REQS="$ROOT/scripts/engine-requirements-$SGLANG_VERSION.txt"
case "$SGLANG_VERSION" in
  0.5.23|0.5.10) TORCH_VERSION=2.13.0 ;;
  *) echo "no recipe for SGLANG_VERSION=$SGLANG_VERSION" >&2; exit 2 ;;
esac
# Contents only: the checkout's path must not make a shared venv look stale (sha256sum prints names).
want="$(cat "$REQS" "$0" "$ROOT/scripts/install-torch.sh" "$ROOT/cpu_engine/pyproject.toml" | sha256sum | cut -c1-16)"
PY="$VENV/bin/python"
install_local() {
  "$PY" -m pip install -q --no-deps -e "$ROOT/cpu_engine" -e "$ROOT" >/dev/null
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  install_local
  echo "engine env ready: $VENV"; exit 0
fi
echo "building engine env (SGLang $SGLANG_VERSION) in $VENV (a few minutes, once)" >&2
if [ "${EAGLE3SCOPE_REBUILD:-0}" = 1 ]; then rm -rf "$VENV"; fi
mkdir -p "$CACHE"
[ -x "$PY" ] || python3.11 -m venv "$VENV"
rm -f "$STAMP"
"$PY" -m pip install -q --upgrade pip==24.3.1
if "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "torch $TORCH_VERSION already in $VENV" >&2
else
  bash "$ROOT/scripts/install-torch.sh" "$PY" "$TORCH_VERSION"
fi
"$PY" -m pip install -q --no-deps "sglang==$SGLANG_VERSION"
"$PY" -m pip install -q -r "$REQS"
install_local
echo "$want" > "$STAMP"
echo "engine env ready: $VENV"
