#!/usr/bin/env bash
# Build (once, cached) a scratch venv with the real `speculators` package, to check that the demo's
# speculators-layout draft is what speculators itself reads (tests/demo/test_demo_models.py).
# speculators pulls torch, torchvision, torchaudio and a CUDA stack through its pins; instead this
# venv borrows torch/transformers/safetensors from the engine venv (a .pth line) and adds only
# speculators (--no-deps) and the few pure-Python modules its eagle3 import path needs.
# Usage: scripts/build-speculators-env.sh   (needs scripts/build-engine-env.sh first)
set -euo pipefail
exec "$(dirname "$0")/build-scratch-env.sh" venv-speculators-0.9.0 \
  "from speculators.models.eagle3.core import Eagle3DraftModel" \
  "speculators==0.9.0 hs-connectors==0.9.0" "datasets==5.1.0 pydantic-settings==2.16.3"
