#!/usr/bin/env bash
# Debian's prometheus package, for the real-Prometheus tests (tests/exporter/test_fleet_engine.py).
# Idempotent: nothing to do when `prometheus` is on PATH. The tests start their own server on a
# loopback port with a private config; the package's system service is kept from starting here.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-prometheus: need root or sudo to apt-get install prometheus" >&2; exit 1; }
  SUDO=sudo
fi
POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=""
if [ ! -e "$POLICY" ]; then   # deny service starts during the install (exit 101), as Debian's docs describe
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod +x "$POLICY"
  ADDED_POLICY=1
fi
cleanup() { if [ -n "$ADDED_POLICY" ]; then $SUDO rm -f "$POLICY"; fi; }
trap cleanup EXIT
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends prometheus
command -v prometheus >/dev/null
