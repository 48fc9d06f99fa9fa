#!/usr/bin/env bash
# The whole local demo: orbit-dev, bootstrap, `receiver init`, `receiver demo`.
#
# Uses ORBIT_RECEIVER_DSN when it is set (an existing, dedicated receiver
# database); otherwise scripts/with-mysql.sh provides a throwaway server.
# Everything this script starts is stopped and removed when it ends, also on
# failure or Ctrl-C. It prints the three lines of the seed:
#   receiver_schema_initialized=true foreign_keys=0
#   task=<id> state=CANCELLED inbox_duplicate=true applied_events=1
#   ack_confirmed=1 pending=0 subscription_enabled=false
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${ORBIT_RECEIVER_DSN:-}" ]; then
  if [ -z "${RESULT_INBOX_TEST_DSN:-}" ]; then
    exec scripts/with-mysql.sh "$0" "$@"
  fi
  export ORBIT_RECEIVER_DSN="$RESULT_INBOX_TEST_DSN"
fi

bin=${CARGO_TARGET_DIR:-target}/debug
work=$(mktemp -d "${TMPDIR:-/tmp}/result-inbox-demo.XXXXXX")
chmod 700 "$work"
orbit_pid=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$orbit_pid" ]; then
    kill "$orbit_pid" 2>/dev/null || true
    wait "$orbit_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$bin/orbit-dev" serve --listen 127.0.0.1:0 --admin-token-file "$work/admin-token" \
  >"$work/orbit.out" 2>"$work/orbit.log" &
orbit_pid=$!
for _ in $(seq 1 100); do
  grep -q 'listening on' "$work/orbit.out" 2>/dev/null && break
  kill -0 "$orbit_pid" 2>/dev/null || { echo "demo: orbit-dev did not start:" >&2; cat "$work/orbit.log" >&2; exit 1; }
  sleep 0.1
done
ORBIT_URL=$(sed -n 's/^orbit-dev listening on //p' "$work/orbit.out")
[ -n "$ORBIT_URL" ] || { echo "demo: orbit-dev did not report its address" >&2; exit 1; }
export ORBIT_URL

"$bin/orbit-dev" bootstrap --url "$ORBIT_URL" --admin-token-file "$work/admin-token" \
  --application inbox-example --namespace default --environment development \
  --queue inbox-demo --event-access --output "$work/inbox.credentials.json" >/dev/null
export ORBIT_CREDENTIALS_FILE="$work/inbox.credentials.json"

# A database prepared before keeps its tables: init changes nothing there,
# and still reads the foreign-key count back from the server.
init_out=$("$bin/receiver" init --keep-existing)
echo "$init_out"

RECEIVER_LOG=${RECEIVER_LOG:-warn} "$bin/receiver" demo
