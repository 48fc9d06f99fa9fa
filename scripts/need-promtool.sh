#!/usr/bin/env bash
# Makes sure `promtool` is on the PATH: the tests check and unit-test the
# shipped alerting rules (deploy/prometheus/) and the dashboard's queries
# with it. Debian's package `prometheus` carries it; installed as root
# without its recommends and without starting the Prometheus server it
# also carries (nothing here uses that server).
set -euo pipefail
. "$(dirname "$0")/apt-install.sh"

if ! command -v promtool >/dev/null 2>&1; then
  echo "need-promtool: promtool not found; trying Debian's prometheus" >&2
  apt_install_quietly --no-install-recommends prometheus || true
fi
if ! command -v promtool >/dev/null 2>&1; then
  echo "need-promtool: promtool not found; install the Debian package 'prometheus' (apt-get install --no-install-recommends prometheus), which carries it" >&2
  exit 2
fi
