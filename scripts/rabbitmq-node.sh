#!/usr/bin/env bash
# A throwaway RabbitMQ node in a directory of its own.
#
#   scripts/rabbitmq-node.sh start DIR [consumer_timeout_ms]
#   scripts/rabbitmq-node.sh stop DIR       (SIGKILL, as a crashed machine stops)
#   scripts/rabbitmq-node.sh restart DIR    (SIGTERM: the node shuts down as a service
#                                            manager stops it; then it starts again on the
#                                            same ports and data)
#
# `start` picks free loopback ports (AMQP, Erlang distribution, epmd),
# writes DIR/rabbitmq.conf, starts Debian's RabbitMQ there with its own node
# name, Mnesia directory, logs, cookie (HOME=DIR), epmd and no plugins, and
# returns once the node takes AMQP connections, printing `amqp_port=PORT`.
# The package's own /etc/rabbitmq settings are not read. No server already
# on the machine is used or touched. Only `stop` ends the node (and its
# epmd); the caller stops what it started.
set -euo pipefail

server=/usr/lib/rabbitmq/bin/rabbitmq-server
[ -x "$server" ] || { echo "rabbitmq-node: $server not found; install the Debian package 'rabbitmq-server' (make rabbitmq-server)" >&2; exit 2; }
[ $# -ge 2 ] || { echo "usage: $0 start|stop|restart DIR [consumer_timeout_ms]" >&2; exit 2; }
action=$1 dir=$2

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Below the kernel's ephemeral range (32768 and up), so that no outgoing
# connection takes the node's port while a restart has it closed.
free_port() {
  local port
  while :; do
    port=$(( 20000 + RANDOM % 12000 ))
    port_in_use "$port" || { echo "$port"; return; }
  done
}

launch() {
  . "$dir/ports"
  # The node's whole environment: nothing of the package's service (and
  # an Erlang crash dump, if any, in DIR).
  cd "$dir"
  env -i PATH="$PATH" HOME="$dir" LANG=C.UTF-8 \
    RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
    RABBITMQ_NODENAME="$name@localhost" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$amqp_port" \
    RABBITMQ_DIST_PORT="$dist_port" ERL_EPMD_PORT="$epmd_port" \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_PID_FILE="$dir/pid" \
    setsid "$server" >>"$dir/server.out" 2>&1 </dev/null &
  echo $! >"$dir/leader"
  local i
  for i in $(seq 1 600); do
    if port_in_use "$amqp_port"; then echo "amqp_port=$amqp_port"; return 0; fi
    if ! kill -0 "$(cat "$dir/leader")" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "rabbitmq-node: the node in $dir did not start; its output:" >&2
  tail -n 30 "$dir/server.out" >&2
  return 1
}

# stop SIGNAL: the node's whole process group; for TERM, waits until the
# node has shut down (RabbitMQ stops in order on SIGTERM).
stop() {
  [ -f "$dir/ports" ] || return 0
  . "$dir/ports"
  if [ -f "$dir/leader" ]; then
    local leader i
    leader=$(cat "$dir/leader")
    kill "-$1" -- "-$leader" 2>/dev/null || true
    for i in $(seq 1 300); do kill -0 -- "-$leader" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$leader" 2>/dev/null || true
    rm -f "$dir/leader"
  fi
  local i
  for i in $(seq 1 100); do port_in_use "$amqp_port" || break; sleep 0.1; done
}

stop_epmd() {
  # The node's epmd outlives it by design (a daemon of its own session),
  # and refuses to stop until it has noticed that the node is gone.
  local i
  for i in $(seq 1 50); do
    epmd -port "$epmd_port" -kill 2>/dev/null | grep -q Killed && return 0
    port_in_use "$epmd_port" || return 0
    sleep 0.1
  done
}

case "$action" in
  start)
    mkdir -p "$dir"
    name="rit$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
    amqp_port=$(free_port) dist_port=$(free_port) epmd_port=$(free_port)
    printf 'name=%s\namqp_port=%s\ndist_port=%s\nepmd_port=%s\n' \
      "$name" "$amqp_port" "$dist_port" "$epmd_port" >"$dir/ports"
    {
      echo "listeners.tcp.1 = 127.0.0.1:$amqp_port"
      echo "disk_free_limit.absolute = 10MB"
      echo "log.console = false"
      echo "log.file.level = info"
      [ -n "${3:-}" ] && echo "consumer_timeout = $3"
    } >"$dir/rabbitmq.conf"
    echo "[]." >"$dir/enabled_plugins"
    # The Erlang schedulers spin while they wait for work, by default: on a
    # small host shared with the database and the receiver that spinning
    # takes the cores they need. RabbitMQ's runtime guide says to turn it
    # off where a node shares its CPUs.
    echo 'SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none"' >"$dir/rabbitmq-env.conf"
    launch
    ;;
  stop) stop KILL; stop_epmd ;;
  restart)
    stop TERM
    # The port may still be held for a moment by the node that just left.
    for attempt in 1 2 3; do
      launch && exit 0
      sleep 1
    done
    exit 1
    ;;
  *) echo "usage: $0 start|stop|restart DIR [consumer_timeout_ms]" >&2; exit 2 ;;
esac
