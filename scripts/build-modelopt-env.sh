#!/usr/bin/env bash
# Build (once, cached) a scratch venv with the real nvidia-modelopt 0.47.0, whose own EagleExporter
# writes the Model-Optimizer drafts under tests/doctor/data/producers/ (scripts/write-producer-drafts.py).
# Like the speculators env, it borrows torch 2.13.0 (CPU), transformers and safetensors from the engine
# venv (a .pth line) and adds modelopt (--no-deps) and the pure-Python modules its import path needs.
# Usage: scripts/build-modelopt-env.sh   (needs scripts/build-engine-env.sh first)
set -euo pipefail
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}"
ENGINE="${EAGLE3SCOPE_ENGINE_VENV:-$CACHE/venv-sglang-0.5.23}"
VENV="$CACHE/venv-modelopt-0.47.0"
if [ -f "$VENV/.built" ]; then echo "modelopt env ready: $VENV"; exit 0; fi
[ -x "$ENGINE/bin/python" ] || { echo "engine venv missing at $ENGINE" >&2; exit 1; }
rm -rf "$VENV"
python3.11 -m venv "$VENV"
SITE="$("$ENGINE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$SITE" > "$VENV/lib/python3.11/site-packages/engine-venv.pth"
"$VENV/bin/pip" install -q --no-deps nvidia-modelopt==0.47.0
"$VENV/bin/pip" install -q omegaconf==2.3.0 pulp==3.3.0 nvidia-ml-py==13.590.48 ninja==1.13.0 scipy==1.15.3
"$VENV/bin/python" -c "import modelopt.torch.speculative as mtsp; from modelopt.torch.export.plugins.hf_spec_export import EagleExporter"
touch "$VENV/.built"
echo "modelopt env ready: $VENV"
