#!/usr/bin/env bash
# Build (once, cached) a scratch venv with the real `speculators` package, to check that the demo's
# speculators-layout draft is what speculators itself reads (tests/test_demo_models.py).
# speculators pulls torch, torchvision, torchaudio and a CUDA stack through its pins; instead this
# venv borrows torch/transformers/safetensors from the engine venv (a .pth line) and adds only
# speculators (--no-deps) and the few pure-Python modules its eagle3 import path needs.
# Usage: scripts/build-speculators-env.sh   (needs scripts/build-engine-env.sh first)
set -euo pipefail
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}"
ENGINE="${EAGLE3SCOPE_ENGINE_VENV:-$CACHE/venv-sglang-0.5.23}"
VENV="$CACHE/venv-speculators-0.9.0"
if [ -f "$VENV/.built" ]; then echo "speculators env ready: $VENV"; exit 0; fi
[ -x "$ENGINE/bin/python" ] || { echo "engine venv missing at $ENGINE" >&2; exit 1; }
rm -rf "$VENV"
python3.11 -m venv "$VENV"
SITE="$("$ENGINE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$SITE" > "$VENV/lib/python3.11/site-packages/engine-venv.pth"
"$VENV/bin/pip" install -q --no-deps speculators==0.9.0 hs-connectors==0.9.0
"$VENV/bin/pip" install -q datasets==5.1.0 pydantic-settings==2.16.3
"$VENV/bin/python" -c "from speculators.models.eagle3.core import Eagle3DraftModel"
touch "$VENV/.built"
echo "speculators env ready: $VENV"
