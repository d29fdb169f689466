#!/usr/bin/env bash
# Build (once, cached) a scratch venv for one producer's real package, borrowing torch, transformers
# and safetensors from the engine venv (a .pth line) instead of the CUDA stack its pins pull.
# Usage: scripts/build-scratch-env.sh NAME "IMPORT CHECK" "PACKAGES (--no-deps)" "PACKAGES (with deps)"
# (needs scripts/build-engine-env.sh first)
set -euo pipefail
NAME="$1" CHECK="$2" NODEPS="$3" EXTRA="$4"
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}"
ENGINE="${EAGLE3SCOPE_ENGINE_VENV:-$CACHE/venv-sglang-0.5.23}"
VENV="$CACHE/$NAME"
if [ -f "$VENV/.built" ]; then echo "$NAME ready: $VENV"; exit 0; fi
[ -x "$ENGINE/bin/python" ] || { echo "engine venv missing at $ENGINE" >&2; exit 1; }
rm -rf "$VENV"
python3.11 -m venv "$VENV"
SITE="$("$ENGINE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$SITE" > "$VENV/lib/python3.11/site-packages/engine-venv.pth"
# shellcheck disable=SC2086  # package lists are word-split on purpose
"$VENV/bin/pip" install -q --no-deps $NODEPS
# shellcheck disable=SC2086
"$VENV/bin/pip" install -q $EXTRA
"$VENV/bin/python" -c "$CHECK"
touch "$VENV/.built"
echo "$NAME ready: $VENV"
