#!/usr/bin/env bash
# Makes sure `nats-server` (with JetStream) is on the PATH for the tests,
# which start their own throwaway servers on free loopback ports. Installs
# Debian's package when run as root; otherwise names the package and stops.
set -euo pipefail
. "$(dirname "$0")/apt-install.sh"

if ! command -v nats-server >/dev/null 2>&1; then
  echo "need-nats: nats-server not found; trying Debian's nats-server" >&2
  apt_install_quietly nats-server || true
fi
if ! command -v nats-server >/dev/null 2>&1; then
  echo "need-nats: nats-server not found; install the Debian package 'nats-server' (apt-get install nats-server)" >&2
  exit 2
fi
