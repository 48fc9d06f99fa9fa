#!/usr/bin/env bash
# Runs a command against a throwaway PostgreSQL server.
#
#   scripts/with-postgres.sh COMMAND [ARGS...]
#
# Initializes a data directory (initdb, UTF8) in a fresh temporary
# directory, starts PostgreSQL there (pg_ctl) on a free loopback port with
# its socket in the same directory, creates the database
# `orbit_receiver_test`, runs COMMAND with these variables set, and always
# stops the server and removes the directory afterwards, also on failure or
# Ctrl-C:
#
#   RESULT_INBOX_TEST_PG_ADMIN_DSN  postgres://postgres@127.0.0.1:PORT/postgres  (may create databases and roles)
#   RESULT_INBOX_TEST_PG_DSN        postgres://postgres@127.0.0.1:PORT/orbit_receiver_test
#   RESULT_INBOX_TEST_PG_PORT       PORT
#   RESULT_INBOX_TEST_PG_DIR        the server's temporary directory
#   RESULT_INBOX_TEST_PG_BIN        the directory of initdb and pg_ctl (for tests that run a
#                                   server of their own, to stop and restart it)
#   RESULT_INBOX_TEST_PG_AUTOCTL    pg_auto_failover's pg_autoctl, for the failover test
#                                   (a monitor and two nodes of its own)
#
# Debian's PostgreSQL (package postgresql) is installed when it is missing
# and this runs as root, and so is pg_auto_failover for that version
# (postgresql-N-auto-failover, which brings pg_autoctl). PostgreSQL refuses to run as root: as root, the
# server runs as the `postgres` account the package creates. No other
# server on the machine is used or touched.
set -euo pipefail
. "$(dirname "$0")/apt-install.sh"

if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi

find_bindir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
  done
  dir=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
  if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
  return 1
}

bindir=$(find_bindir || true)
if [ -z "$bindir" ]; then
  echo "with-postgres: no PostgreSQL server found; trying Debian's postgresql" >&2
  if apt_install_quietly postgresql; then
    bindir=$(find_bindir || true)
  fi
  if [ -z "$bindir" ]; then
    echo "with-postgres: no PostgreSQL server found; install the Debian package 'postgresql' (apt-get install postgresql)" >&2
    exit 2
  fi
fi

major=$("$bindir/pg_ctl" --version | sed -E 's/[^0-9]*([0-9]+).*/\1/')
autoctl=$(command -v pg_autoctl || true)
if [ -z "$autoctl" ] || [ ! -e "$bindir/../lib/pgautofailover.so" ]; then
  echo "with-postgres: pg_auto_failover missing; trying Debian's postgresql-$major-auto-failover" >&2
  apt_install_quietly "postgresql-$major-auto-failover" || true
  autoctl=$(command -v pg_autoctl || true)
  if [ -z "$autoctl" ] || [ ! -e "$bindir/../lib/pgautofailover.so" ]; then
    echo "with-postgres: pg_auto_failover not found; install the Debian package 'postgresql-$major-auto-failover'" >&2
    exit 2
  fi
fi

as_server=()
if [ "$(id -u)" = 0 ]; then
  if ! id postgres >/dev/null 2>&1; then
    echo "with-postgres: PostgreSQL does not run as root and there is no 'postgres' account; install the Debian package 'postgresql', which creates it" >&2
    exit 2
  fi
  as_server=(runuser -u postgres --)
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/result-inbox-postgres.XXXXXX")
chmod 755 "$tmp"
[ "$(id -u)" = 0 ] && chown postgres "$tmp"
started=0
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ "$started" = 1 ]; then
    "${as_server[@]}" "$bindir/pg_ctl" -D "$tmp/data" -m immediate -w -t 10 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"${as_server[@]}" "$bindir/initdb" -D "$tmp/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
  >"$tmp/initdb.log" 2>&1 || {
  echo "with-postgres: initializing the data directory failed:" >&2; cat "$tmp/initdb.log" >&2; exit 1; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

for _ in $(seq 1 20); do
  port=$(( 20000 + RANDOM % 40000 ))
  port_in_use "$port" && continue
  if "${as_server[@]}" "$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 30 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $tmp -c max_connections=300" start >/dev/null 2>&1; then
    started=1
    break
  fi
  "${as_server[@]}" "$bindir/pg_ctl" -D "$tmp/data" -m immediate stop >/dev/null 2>&1 || true
done
if [ "$started" != 1 ]; then
  echo "with-postgres: the server did not start; its log:" >&2
  tail -n 30 "$tmp/server.log" >&2 || true
  exit 1
fi

"$bindir/psql" -X -q -h "$tmp" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
  -c "CREATE DATABASE orbit_receiver_test ENCODING 'UTF8'" >/dev/null

export RESULT_INBOX_TEST_PG_ADMIN_DSN="postgres://postgres@127.0.0.1:$port/postgres"
export RESULT_INBOX_TEST_PG_DSN="postgres://postgres@127.0.0.1:$port/orbit_receiver_test"
export RESULT_INBOX_TEST_PG_PORT="$port"
export RESULT_INBOX_TEST_PG_DIR="$tmp"
export RESULT_INBOX_TEST_PG_BIN="$bindir"
export RESULT_INBOX_TEST_PG_AUTOCTL="$autoctl"
echo "with-postgres: throwaway server on 127.0.0.1:$port (database orbit_receiver_test)" >&2

"$@"
