#!/usr/bin/env bash
# Install a CPU torch into a venv from where a user's machine has one, and say which source it used.
# Usage: scripts/install-torch.sh PYTHON TORCH_VERSION [--dry-run]
#   EAGLE3SCOPE_TORCH_FROM=DIR_OR_URL  take torch from this wheel directory or package index, nothing else;
#   otherwise the PyTorch CPU wheel index ($TORCH_CPU_INDEX, default below) when it answers,
#   else the package index pip is configured with (PyPI's Linux torch is the larger CUDA build; it runs on CPU).
# --dry-run prints the decision and the pip arguments instead of installing.
set -euo pipefail
PY="$1"
VERSION="$2"
DRY="${3:-}"
CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
FROM="${EAGLE3SCOPE_TORCH_FROM:-}"

answers() {  # does this package index list torch? (a few seconds at most)
  "$PY" - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=8) as page:
        sys.exit(0 if b"torch-" in page.read() else 1)
except Exception:
    sys.exit(1)
EOF
}

# First the torch wheel itself (no dependencies, only from the chosen source), then its dependencies
# from wherever pip normally looks.
if [ -n "$FROM" ]; then
  if [ -d "$FROM" ]; then
    source="the wheel directory $FROM (EAGLE3SCOPE_TORCH_FROM)"
    first=(--no-index --find-links "$FROM")
  else
    source="the package index $FROM (EAGLE3SCOPE_TORCH_FROM)"
    first=(--index-url "$FROM")
  fi
elif answers "$CPU_INDEX"; then
  source="the PyTorch CPU wheel index $CPU_INDEX"
  first=(--index-url "$CPU_INDEX")
else
  source="the package index (PyTorch CPU wheel index $CPU_INDEX not reachable; set EAGLE3SCOPE_TORCH_FROM to a wheel directory or index to choose)"
  first=()
fi
echo "torch $VERSION from $source" >&2
if [ "$DRY" = --dry-run ]; then
  echo "pip install --no-deps ${first[*]} torch==$VERSION"
  exit 0
fi
"$PY" -m pip install -q --no-deps "${first[@]}" "torch==$VERSION"
"$PY" -m pip install -q "torch==$VERSION"
"$PY" -c 'import torch; print("torch", torch.__version__, "installed", file=__import__("sys").stderr)'
