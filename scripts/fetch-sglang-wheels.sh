#!/usr/bin/env bash
# Cache the SGLang wheels of the releases in the compat table (no install) for tests/shim/test_compat_static.py,
# and the ones that pin the doctor's first releases (eagle3scope/doctor/loader_layouts.py BOUNDARY_WHEELS).
# Usage: scripts/fetch-sglang-wheels.sh [VERSION ...]   (default: all of those)
set -uo pipefail
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}/wheels"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ "$#" -gt 0 ]; then VERSIONS=("$@"); else
  mapfile -t VERSIONS < <(PYTHONPATH="$ROOT/instrumentation:$ROOT" "$PY" -c 'from eagle3scope_shim.seams import COMPAT_RELEASES
from eagle3scope.doctor.loader_layouts import BOUNDARY_WHEELS
print("\n".join(COMPAT_RELEASES + BOUNDARY_WHEELS))')
fi
mkdir -p "$CACHE"
rc=0
for v in "${VERSIONS[@]}"; do
  if ls "$CACHE"/sglang-"$v"-*.whl >/dev/null 2>&1; then continue; fi
  echo "fetching sglang==$v" >&2
  "$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$CACHE" "sglang==$v" || { echo "could not fetch sglang==$v" >&2; rc=1; }
done
exit $rc
