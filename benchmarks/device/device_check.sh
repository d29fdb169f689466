#!/usr/bin/env bash
# The shim's GPU checks as one prepared run on a lent CUDA machine that has PyTorch but no SGLang
# (at most 8 minutes on an H100). From the repo root:
#   here:   echo /.device-wheels/ >> .git/info/exclude
#           .venv/bin/pip download pyzmq --no-deps --python-version 3.12 --only-binary=:all: \
#               --platform manylinux_2_28_x86_64 -d .device-wheels        # the image lacks pyzmq (< 64 MiB)
#   device: run(command="bash benchmarks/device/device_check.sh", carry=[".device-wheels"], timeout_s=540)
# Checks A-F are benchmarks/device/device_check.py's (its docstring says what each shows); it prints one
# table of figures. Then the aux-recapture check (graph_recapture_check.py). Writes to $OUT:
#   gpu.txt                     GPU, driver, torch
#   device_check.json           every row of the table
#   hook_path_cuda.json, hook_path_cpu.json   check E's raw figures
#   recapture.json              aux change under a captured torch.cuda.CUDAGraph (pause_ms)
# Without a CUDA device it says "no CUDA device: skipped" and exits 0.
set -euo pipefail
OUT="${OUT:-/tmp/e3s-device}"
DEPS=/tmp/e3s-pydeps
mkdir -p "$OUT" "$DEPS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/instrumentation:$PWD:$DEPS"
PYTHON="${PYTHON:-python3}"
shopt -s nullglob
wheels=(.device-wheels/*.whl)
if ((${#wheels[@]})); then
    "$PYTHON" -m pip install -q --no-index --no-deps --target "$DEPS" "${wheels[@]}"
else
    echo "no .device-wheels: check E and the recapture check need pyzmq" >&2
fi
{
    if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; fi
    "$PYTHON" -c "import torch; print('torch', torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())" \
        2>/dev/null || echo "no PyTorch"
} | tee "$OUT/gpu.txt"
timeout 380 "$PYTHON" benchmarks/device/device_check.py --out "$OUT" --budget-s 340 | tee "$OUT/device_check.txt"
if grep -q "no CUDA device: skipped" "$OUT/device_check.txt"; then
    exit 0
fi
timeout 35 "$PYTHON" benchmarks/device/graph_recapture_check.py --device cuda | tee "$OUT/recapture.json" || true
timeout 35 "$PYTHON" benchmarks/device/graph_recapture_check.py --device cuda --layers 8 --hidden 1024 --bs 8 \
    | tee -a "$OUT/recapture.json" || true
