#!/usr/bin/env bash
# Makes sure `nats-server` (with JetStream) is on the PATH for the tests,
# which start their own throwaway servers on free loopback ports. Installs
# Debian's package when run as root; otherwise names the package and stops.
set -euo pipefail

if command -v nats-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "need-nats: installing Debian's nats-server (not found on the PATH)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # Installing must not start a system-wide server: the tests run their own.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1
  fi
  apt-get install -y -qq nats-server >&2 || true
  [ "$created_policy" = 1 ] && rm -f "$policy"
fi
if ! command -v nats-server >/dev/null 2>&1; then
  echo "need-nats: nats-server not found; install the Debian package 'nats-server' (apt-get install nats-server)" >&2
  exit 2
fi
