#!/usr/bin/env bash
# The shim's GPU checks, as one prepared run on a lent device (issue 17). From the repo root:
#   here:   .venv/bin/pip download pyzmq --python-version 3.12 --only-binary=:all: \
#               --platform manylinux_2_28_x86_64 -d .device-wheels        # the image lacks pyzmq
#   device: run(command="bash benchmarks/device_check.sh", carry=[".device-wheels"], timeout_s=420)
# It needs the image's python3 with torch and msgpack, and no SGLang. Writes to $OUT:
#   gpu.txt                 GPU, driver, torch
#   hook_path_cuda.json     hook path per round with every tensor on the GPU, the hooked rounds under
#                           torch.cuda.set_sync_debug_mode("error") (a sync raises), ring of pinned buffers
#   hook_path_cpu.json      the same on that host's CPU, for the difference
#   recapture.json          aux change under a captured torch.cuda.CUDAGraph through the AuxChannel (pause_ms)
# Goal (BENCHMARKS.md, "Shim"): hook path <= 25 us per round on the GPU host, no sync.
set -euo pipefail
OUT="${OUT:-/tmp/e3s-device}"
mkdir -p "$OUT" /tmp/e3s-pydeps
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/instrumentation:$PWD:/tmp/e3s-pydeps"
python3 -m pip install -q --no-index --no-deps --target /tmp/e3s-pydeps .device-wheels/*.whl
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; } | tee "$OUT/gpu.txt"
python3 benchmarks/bench_shim.py --hook-path-only --steps 4000 --device cuda | tee "$OUT/hook_path_cuda.json"
python3 benchmarks/bench_shim.py --hook-path-only --steps 4000 --device cpu | tee "$OUT/hook_path_cpu.json"
python3 benchmarks/graph_recapture_check.py --device cuda | tee "$OUT/recapture.json"
python3 benchmarks/graph_recapture_check.py --device cuda --layers 8 --hidden 1024 --bs 8 | tee -a "$OUT/recapture.json"
