#!/usr/bin/env bash
# Makes sure RabbitMQ's server is installed for the tests, which start
# their own throwaway nodes (a node name, a data directory, an epmd and
# ports of their own on loopback) and never the service the package runs.
# Installs Debian's package when run as root, without starting its
# service; otherwise names the package and stops.
set -euo pipefail
. "$(dirname "$0")/apt-install.sh"

server=/usr/lib/rabbitmq/bin/rabbitmq-server
if [ ! -x "$server" ]; then
  echo "need-rabbitmq: $server not found; trying Debian's rabbitmq-server" >&2
  apt_install_quietly --no-install-recommends rabbitmq-server || true
fi
if [ ! -x "$server" ]; then
  echo "need-rabbitmq: RabbitMQ not found; install the Debian package 'rabbitmq-server' (apt-get install rabbitmq-server)" >&2
  exit 2
fi
