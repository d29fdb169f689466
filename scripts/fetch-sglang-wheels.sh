#!/usr/bin/env bash
# Cache the SGLang wheels of the releases in the compat table (no install) for tests/test_compat_static.py.
# Usage: scripts/fetch-sglang-wheels.sh [VERSION ...]   (default: every release the table surveys)
set -uo pipefail
CACHE="${EAGLE3SCOPE_CACHE:-$HOME/.cache/eagle3scope}/wheels"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ "$#" -gt 0 ]; then VERSIONS=("$@"); else
  mapfile -t VERSIONS < <(PYTHONPATH="$ROOT/instrumentation" "$PY" -c 'from eagle3scope_shim.seams import COMPAT_RELEASES; print("\n".join(COMPAT_RELEASES))')
fi
mkdir -p "$CACHE"
rc=0
for v in "${VERSIONS[@]}"; do
  if ls "$CACHE"/sglang-"$v"-*.whl >/dev/null 2>&1; then continue; fi
  echo "fetching sglang==$v" >&2
  "$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$CACHE" "sglang==$v" || { echo "could not fetch sglang==$v" >&2; rc=1; }
done
exit $rc
