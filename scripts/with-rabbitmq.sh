#!/usr/bin/env bash
# Runs a command against a throwaway RabbitMQ node.
#
#   scripts/with-rabbitmq.sh COMMAND [ARGS...]
#
# Starts a node of its own (scripts/rabbitmq-node.sh) in a fresh temporary
# directory on free loopback ports, runs COMMAND with this variable set,
# and always stops the node and removes the directory afterwards, also on
# failure or Ctrl-C:
#
#   RESULT_INBOX_TEST_AMQP_URL      amqp://guest:guest@127.0.0.1:PORT/  (the default vhost; each test declares queues of its own)
#   RESULT_INBOX_TEST_RABBITMQ_DIR  the node's directory (its pid file: a benchmark counts its CPU)
#
# Tests that restart RabbitMQ start nodes of their own. Debian's
# rabbitmq-server is installed when it is missing and this runs as root.
# No other server on the machine is used or touched.
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi
here=$(dirname "$0")
"$here/need-rabbitmq.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/result-inbox-rabbitmq.XXXXXX")
cleanup() {
  "$here/rabbitmq-node.sh" stop "$tmp" || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

started=$("$here/rabbitmq-node.sh" start "$tmp")
port=${started#amqp_port=}
export RESULT_INBOX_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/"
export RESULT_INBOX_TEST_RABBITMQ_DIR="$tmp"
echo "with-rabbitmq: throwaway node on 127.0.0.1:$port" >&2
status=0
"$@" || status=$?
exit $status
