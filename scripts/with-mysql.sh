#!/usr/bin/env bash
# Runs a command against a throwaway MySQL-compatible server.
#
#   scripts/with-mysql.sh COMMAND [ARGS...]
#
# Starts mariadbd (or mysqld) in a fresh temporary directory on a free
# loopback port, creates the databases `orbit_test` (stands for the platform's
# own database, which the receiver must never touch) and `orbit_receiver_test`
# (the receiver's), runs COMMAND with these variables set, and always stops
# the server and removes the directory afterwards, also on failure or Ctrl-C:
#
#   RESULT_INBOX_TEST_ADMIN_DSN  mysql://root@127.0.0.1:PORT/mysql  (may create databases and users)
#   RESULT_INBOX_TEST_DSN        mysql://root@127.0.0.1:PORT/orbit_receiver_test
#   RESULT_INBOX_TEST_PLATFORM_DB  orbit_test
#   RESULT_INBOX_TEST_MYSQL_PORT PORT
#   RESULT_INBOX_TEST_MYSQL_DIR  the server's temporary directory (general.log: every statement
#                                sent after the databases were created)
#
# No other server on the machine is used or touched.
set -euo pipefail
. "$(dirname "$0")/apt-install.sh"

if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi

find_server() {
  for bin in mariadbd mysqld; do
    for dir in /usr/sbin /usr/bin /usr/local/sbin /usr/local/bin; do
      if [ -x "$dir/$bin" ]; then echo "$dir/$bin"; return 0; fi
    done
  done
  return 1
}

server=$(find_server || true)
if [ -z "$server" ]; then
  echo "with-mysql: no MySQL-compatible server found; trying Debian's mariadb-server" >&2
  if apt_install_quietly mariadb-server mariadb-client; then
    server=$(find_server || true)
  fi
  if [ -z "$server" ]; then
    echo "with-mysql: no MySQL-compatible server found; install the Debian package 'mariadb-server' (apt-get install mariadb-server)" >&2
    exit 2
  fi
fi

install_db=$(command -v mariadb-install-db || command -v mysql_install_db || true)
client=$(command -v mariadb || command -v mysql || true)
if [ -z "$install_db" ] || [ -z "$client" ]; then
  echo "with-mysql: mariadb-install-db or the mariadb client is missing; install the Debian packages 'mariadb-server' and 'mariadb-client'" >&2
  exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/result-inbox-mysql.XXXXXX")
pid=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

user_args=()
if [ "$(id -u)" = 0 ]; then user_args=(--user=root); fi

# A temporary directory of its own: a server deletes every "#sql*" file in
# its tmpdir when it starts, which would pull temporary tables from under
# another server starting beside it.
mkdir -p "$tmp/tmp"
"$install_db" --no-defaults --datadir="$tmp/data" --tmpdir="$tmp/tmp" --auth-root-authentication-method=normal \
  --skip-test-db "${user_args[@]}" >"$tmp/install.log" 2>&1 || {
  echo "with-mysql: initializing the data directory failed:" >&2; cat "$tmp/install.log" >&2; exit 1; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

started=0
for _ in $(seq 1 20); do
  port=$(( 20000 + RANDOM % 40000 ))
  port_in_use "$port" && continue
  "$server" --no-defaults --datadir="$tmp/data" --tmpdir="$tmp/tmp" --socket="$tmp/mysql.sock" \
    --pid-file="$tmp/mysqld.pid" --log-error="$tmp/error.log" \
    --bind-address=127.0.0.1 --port="$port" --skip-name-resolve \
    --innodb-buffer-pool-size=128M --innodb-log-file-size=48M \
    --max-connections=500 --general-log=0 --general-log-file="$tmp/general.log" \
    "${user_args[@]}" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    if "$client" --no-defaults -uroot --socket="$tmp/mysql.sock" -e 'SELECT 1' >/dev/null 2>&1; then
      started=1; break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ "$started" = 1 ] && break
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""
done
if [ "$started" != 1 ]; then
  echo "with-mysql: the server did not start; its log:" >&2
  tail -n 30 "$tmp/error.log" >&2 || true
  exit 1
fi

"$client" --no-defaults -uroot --socket="$tmp/mysql.sock" -e \
  "CREATE DATABASE orbit_test CHARACTER SET utf8mb4; CREATE DATABASE orbit_receiver_test CHARACTER SET utf8mb4;"
# From here on every statement is logged, so that tests can prove what was
# (and was not) sent: e.g. that nothing names the platform's database.
"$client" --no-defaults -uroot --socket="$tmp/mysql.sock" -e "SET GLOBAL general_log = 1"

export RESULT_INBOX_TEST_ADMIN_DSN="mysql://root@127.0.0.1:$port/mysql"
export RESULT_INBOX_TEST_DSN="mysql://root@127.0.0.1:$port/orbit_receiver_test"
export RESULT_INBOX_TEST_PLATFORM_DB=orbit_test
export RESULT_INBOX_TEST_MYSQL_PORT="$port"
export RESULT_INBOX_TEST_MYSQL_DIR="$tmp"
echo "with-mysql: throwaway server on 127.0.0.1:$port (databases orbit_test, orbit_receiver_test)" >&2

"$@"
