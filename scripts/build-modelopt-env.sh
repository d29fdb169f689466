#!/usr/bin/env bash
# Build (once, cached) a scratch venv with the real nvidia-modelopt 0.47.0, whose own EagleExporter
# writes the Model-Optimizer drafts under tests/doctor/data/producers/ (scripts/write-producer-drafts.py).
# Like the speculators env, it borrows torch 2.13.0 (CPU), transformers and safetensors from the engine
# venv and adds modelopt (--no-deps) and the modules its import path needs.
# Usage: scripts/build-modelopt-env.sh   (needs scripts/build-engine-env.sh first)
set -euo pipefail
exec "$(dirname "$0")/build-scratch-env.sh" venv-modelopt-0.47.0 \
  "import modelopt.torch.speculative; from modelopt.torch.export.plugins.hf_spec_export import EagleExporter" \
  "nvidia-modelopt==0.47.0" "omegaconf==2.3.0 pulp==3.3.0 nvidia-ml-py==13.590.48 ninja==1.13.0 scipy==1.15.3"
