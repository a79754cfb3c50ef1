#!/usr/bin/env bash
# Throwaway MariaDB instances for the local demo: install the server package if absent,
# initialise a datadir once, start an instance per port with TLS, load the canary schema.
# Usage: mariadb.sh install | start NAME PORT DIR CERT KEY CA PASSWORD | stop DIR | sql DIR SQL
# MARIADB_BIND: the address `start` listens on (default 127.0.0.1; e.g. a network namespace's).
set -euo pipefail

log() { printf 'mariadb.sh: %s\n' "$*" >&2; }

install() {
  if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then
    return 0
  fi
  log "mariadbd not found; installing mariadb-server (Debian package)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq mariadb-server mariadb-client >/dev/null
}

start() {
  local name=$1 port=$2 dir=$3 cert=$4 key=$5 ca=$6 password=$7
  local bin; bin=$(command -v mariadbd || echo /usr/sbin/mariadbd)
  mkdir -p "$dir"
  if [ ! -d "$dir/data/mysql" ]; then
    mariadb-install-db --no-defaults --user=root --datadir="$dir/data" \
      --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 \
      || { log "datadir initialisation failed; see $dir/install.log"; exit 1; }
  fi
  if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    log "$name already running on port $port"
  else
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      log "port $port is already in use; stop what listens there or change the port"; exit 1
    fi
    "$bin" --no-defaults --user=root --datadir="$dir/data" --port="$port" \
      --bind-address="${MARIADB_BIND:-127.0.0.1}" --socket="$dir/sock" --pid-file="$dir/pid" --skip-log-bin \
      --innodb-buffer-pool-size=32M --ssl-cert="$cert" --ssl-key="$key" --ssl-ca="$ca" \
      --log-error="$dir/error.log" >/dev/null 2>&1 &
    for _ in $(seq 1 100); do
      mariadb --no-defaults -uroot --socket="$dir/sock" -e 'SELECT 1' >/dev/null 2>&1 && break
      sleep 0.1
    done
    mariadb --no-defaults -uroot --socket="$dir/sock" -e 'SELECT 1' >/dev/null 2>&1 \
      || { log "$name did not start; see $dir/error.log"; tail -5 "$dir/error.log" >&2; exit 1; }
    log "$name listening on ${MARIADB_BIND:-127.0.0.1}:$port (TLS)"
  fi
  local here; here=$(cd "$(dirname "$0")/../.." && pwd)
  sed "s/@PASSWORD@/$password/" "$here/probes/mysql-canary.sql" \
    | mariadb --no-defaults -uroot --socket="$dir/sock"
}

stop() {
  local dir=$1
  if [ -f "$dir/pid" ]; then
    kill "$(cat "$dir/pid")" 2>/dev/null || true
  fi
}

sql() {
  mariadb --no-defaults -uroot --socket="$1/sock" -e "$2"
}

cmd=${1:-}; shift || true
case "$cmd" in
  install) install ;;
  start) start "$@" ;;
  stop) stop "$@" ;;
  sql) sql "$@" ;;
  *) echo "usage: $0 install | start NAME PORT DIR CERT KEY CA PASSWORD | stop DIR | sql DIR SQL" >&2; exit 64 ;;
esac
