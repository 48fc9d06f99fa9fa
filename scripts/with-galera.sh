#!/usr/bin/env bash
# Runs COMMAND with a throwaway three-node MariaDB Galera cluster on loopback.
#
#   scripts/with-galera.sh cargo test --test cluster
#
# Every node has its own data directory, tmpdir and ports (client, group
# communication, incremental and full state transfer) under one temporary
# directory, removed afterwards. Node 1 bootstraps the cluster; nodes 2 and 3
# join it from copies of its data directory, while COMMAND already runs
# (see "ready" below); a node a test restarts joins by a full state
# transfer (mariadb-backup over socat). For COMMAND:
#
#   RESULT_INBOX_GALERA_DSNS   the three root DSNs, comma-separated
#   RESULT_INBOX_GALERA_DIR    the directory; node<N>/start starts node N
#                              again (after it was killed), node<N>/pid is
#                              its process id; "ready" appears when all
#                              three nodes are Synced, "failed" when the
#                              start failed (start.log says why)
#
# Needs Debian's mariadb-server, galera-4, mariadb-backup and socat
# (installed when missing and run as root). No other server on the machine is used or touched.
set -euo pipefail
. "$(dirname "$0")/apt-install.sh"

if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi

provider=""
find_provider() {
  for p in /usr/lib/galera/libgalera_smm.so /usr/lib/libgalera_smm.so /usr/lib/galera-4/libgalera_smm.so; do
    if [ -e "$p" ]; then echo "$p"; return 0; fi
  done
  return 1
}
server=$(command -v mariadbd || true)
[ -z "$server" ] && [ -x /usr/sbin/mariadbd ] && server=/usr/sbin/mariadbd
provider=$(find_provider || true)
have_all() {
  [ -n "$server" ] && [ -n "$provider" ] && command -v mariadb-backup >/dev/null 2>&1 \
    && command -v socat >/dev/null 2>&1
}
if ! have_all; then
  echo "with-galera: installing Debian's mariadb-server, galera-4, mariadb-backup and socat" >&2
  apt_install_quietly mariadb-server mariadb-client galera-4 mariadb-backup socat || true
  server=$(command -v mariadbd || true)
  [ -z "$server" ] && [ -x /usr/sbin/mariadbd ] && server=/usr/sbin/mariadbd
  provider=$(find_provider || true)
fi
if ! have_all; then
  echo "with-galera: a Galera cluster needs the Debian packages 'mariadb-server', 'galera-4', 'mariadb-backup' and 'socat' (apt-get install mariadb-server galera-4 mariadb-backup socat)" >&2
  exit 2
fi
install_db=$(command -v mariadb-install-db || command -v mysql_install_db)
client=$(command -v mariadb || command -v mysql)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/result-inbox-galera.XXXXXX")
starter=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  # A start still under way first, so that it starts no node after this.
  if [ -n "$starter" ]; then
    kill "$starter" 2>/dev/null || true
    wait "$starter" 2>/dev/null || true
  fi
  for n in 1 2 3; do
    if [ -f "$tmp/node$n/pid" ]; then
      pid=$(cat "$tmp/node$n/pid")
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  sleep 0.2
  if [ "$status" != 0 ]; then
    # What the cluster went through, for a failure seen only in CI's log:
    # each node's last warnings and errors (state changes, evictions,
    # stalled appliers).
    for n in 1 2 3; do
      if [ -f "$tmp/node$n/error.log" ]; then
        echo "with-galera: node $n, last warnings and errors:" >&2
        grep -E '\[(Warning|ERROR)\]' "$tmp/node$n/error.log" | tail -n 15 >&2 || true
      fi
    done
  fi
  if [ "$status" != 0 ] && [ -n "${RESULT_INBOX_GALERA_KEEP:-}" ]; then
    echo "with-galera: kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

user_args=""
if [ "$(id -u)" = 0 ]; then user_args="--user=root"; fi

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Ports below the kernel's ephemeral range, so that no outgoing connection
# holds one of them as its local port; each taken once (the table lives in
# this shell, so free_port sets a variable instead of printing).
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
declare -A used=()
port=""
free_port() {
  while :; do
    local p=$(( 10000 + RANDOM % (ephemeral_low - 10000) ))
    if [ -z "${used[$p]:-}" ] && ! port_in_use "$p"; then used[$p]=1; port=$p; return; fi
  done
}

declare -a client_port gcomm_port ist_port sst_port
for n in 1 2 3; do
  free_port; client_port[$n]=$port
  free_port; gcomm_port[$n]=$port
  free_port; ist_port[$n]=$port
  free_port; sst_port[$n]=$port
done
cluster="gcomm://127.0.0.1:${gcomm_port[1]},127.0.0.1:${gcomm_port[2]},127.0.0.1:${gcomm_port[3]}"

for n in 1 2 3; do
  dir="$tmp/node$n"
  mkdir -p "$dir/tmp"
  ist=${ist_port[$n]}; sst=${sst_port[$n]}
  # The start command of the node, kept so that a test can start a killed
  # node again; "$@" takes --wsrep-new-cluster for the first start of node 1.
  cat >"$dir/start" <<EOF
#!/usr/bin/env bash
cd "$dir"
"$server" --no-defaults --datadir="$dir/data" --tmpdir="$dir/tmp" --socket="$dir/mysql.sock" \\
  --pid-file="$dir/mysqld.pid" --log-error="$dir/error.log" \\
  --bind-address=127.0.0.1 --port=${client_port[$n]} --skip-name-resolve $user_args \\
  --innodb-log-file-size=48M --max-connections=300 \\
  --binlog-format=ROW --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2 \\
  --wsrep-on=ON --wsrep-provider="$provider" --wsrep-cluster-name=result-inbox-test \\
  --wsrep-cluster-address="$cluster" --wsrep-node-name=node$n \\
  --wsrep-node-address=127.0.0.1:${gcomm_port[$n]} \\
  --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:${gcomm_port[$n]};ist.recv_addr=127.0.0.1:$ist;gcache.size=64M" \\
  --wsrep-sst-method=mariabackup --wsrep-sst-auth=root: --wsrep-sst-receive-address=127.0.0.1:$sst \\
  "\$@" >/dev/null 2>&1 &
echo \$! >"$dir/pid"
EOF
  chmod +x "$dir/start"
done
# Nodes 2 and 3 start from copies of node 1's data directory (below).
"$install_db" --no-defaults --datadir="$tmp/node1/data" --tmpdir="$tmp/node1/tmp" \
  --auth-root-authentication-method=normal --skip-test-db $user_args >"$tmp/node1/install.log" 2>&1 || {
  echo "with-galera: initializing node 1 failed:" >&2; cat "$tmp/node1/install.log" >&2; exit 1; }

# Synced: the node is in the primary component and has the cluster's state.
wait_synced() {
  local n=$1
  for _ in $(seq 1 600); do
    state=$("$client" --no-defaults -uroot --socket="$tmp/node$n/mysql.sock" -N -e \
      "SHOW GLOBAL STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2 || true)
    [ "$state" = "Synced" ] && return 0
    kill -0 "$(cat "$tmp/node$n/pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "with-galera: node $n did not reach Synced; its log:" >&2
  tail -n 40 "$tmp/node$n/error.log" >&2 || true
  exit 1
}

# Stops node N cleanly (its grastate.dat then records the cluster's state).
stop_node() {
  local pid
  pid=$(cat "$tmp/node$1/pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "with-galera: node $1 did not stop" >&2
  exit 1
}

# Node 1 bootstraps the cluster and stops cleanly; nodes 2 and 3 start from
# copies of its data directory, whose grastate.dat holds the cluster's
# state, so that they join without a state transfer (two full transfers
# took 28 s of the start). A node restarted by a test later joins by a
# state transfer, as in production.
start_cluster() {
  "$tmp/node1/start" --wsrep-new-cluster
  wait_synced 1
  stop_node 1
  for n in 2 3; do
    cp -a "$tmp/node1/data" "$tmp/node$n/data"
    # The copy is one more member of the same cluster, not node 1.
    rm -f "$tmp/node$n/data/gvwstate.dat" "$tmp/node$n/data/galera.cache"
    sed -i 's/^safe_to_bootstrap: 1/safe_to_bootstrap: 0/' "$tmp/node$n/data/grastate.dat"
  done
  "$tmp/node1/start" --wsrep-new-cluster
  wait_synced 1
  "$tmp/node2/start"
  "$tmp/node3/start"
  wait_synced 2
  wait_synced 3
  size=$("$client" --no-defaults -uroot --socket="$tmp/node1/mysql.sock" -N -e \
    "SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'" | cut -f2)
  if [ "$size" != 3 ]; then
    echo "with-galera: the cluster has $size nodes, not 3" >&2
    exit 1
  fi
}

# A joining node spends most of its start waiting on its state transfer,
# and a test run spends its first minutes compiling: the cluster starts
# beside COMMAND, and says when it is ready ($tmp/ready) or why it is not
# ($tmp/failed, $tmp/start.log). tests/common/galera.rs waits for it.
( if (start_cluster); then touch "$tmp/ready"; else touch "$tmp/failed"; fi ) 2>"$tmp/start.log" &
starter=$!

export RESULT_INBOX_GALERA_DSNS="mysql://root@127.0.0.1:${client_port[1]}/mysql,mysql://root@127.0.0.1:${client_port[2]}/mysql,mysql://root@127.0.0.1:${client_port[3]}/mysql"
export RESULT_INBOX_GALERA_DIR="$tmp"
echo "with-galera: three-node cluster starting on 127.0.0.1:${client_port[1]},${client_port[2]},${client_port[3]}" >&2

"$@"
