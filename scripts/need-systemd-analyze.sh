#!/usr/bin/env bash
# Makes sure `systemd-analyze` is on the PATH: the tests verify the shipped
# service unit (deploy/systemd/) with it. Debian's package `systemd`
# carries it; installed as root without its recommends. That package does
# not make systemd the init (`systemd-sysv`, which it does not pull in,
# links /sbin/init), and a container's init is what the container starts
# anyway. Where it cannot be had the unit's test says it skipped
# `systemd-analyze` and checks the rest.
set -euo pipefail
. "$(dirname "$0")/apt-install.sh"

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "need-systemd-analyze: systemd-analyze not found; trying Debian's systemd" >&2
  apt_install_quietly --no-install-recommends systemd || true
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "need-systemd-analyze: systemd-analyze not found (Debian's package 'systemd'); the service unit's test will skip its check" >&2
fi
exit 0
