#!/usr/bin/env bash
# Build (once, cached outside the repo) an isolated venv with the real SGLang 0.5.23 for CPU.
# Usage: scripts/build-engine-env.sh [VENV_DIR]   (default: $EAGLE3SCOPE_CACHE/venv-sglang-0.5.23)
set -euo pipefail
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}"
VENV="${1:-$CACHE/venv-sglang-$SGLANG_VERSION}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STAMP="$VENV/.eagle3scope-built"
REQS="$ROOT/scripts/engine-requirements-$SGLANG_VERSION.txt"
want="$(sha256sum "$REQS" "$0" | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  "$VENV/bin/pip" install -q --no-deps -e "$ROOT" >/dev/null
  echo "engine env ready: $VENV"; exit 0
fi
echo "building engine env in $VENV (a few minutes, once)" >&2
rm -rf "$VENV"; mkdir -p "$CACHE"
python3.11 -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip==24.3.1
"$PIP" install -q torch==2.13.0
"$PIP" install -q --no-deps "sglang==$SGLANG_VERSION"
"$PIP" install -q -r "$REQS"
"$PIP" install -q --no-deps -e "$ROOT"
echo "$want" > "$STAMP"
echo "engine env ready: $VENV"
