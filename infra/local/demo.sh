#!/usr/bin/env bash
# The main job on its embedded default, on a fresh machine, in one command:
# installs MariaDB if absent, starts two local instances (PRIMARY, SECONDARY) with TLS from a
# throwaway CA, loads the canary schema, and runs `readyprobe run` against them for a bounded
# time. Midway it makes the primary read-only and then writable again, so
# the run shows a failover (primary unready) and a slow failback (primary ready again), marking
# both as drill `fault` and `restore` in the evidence so `drill report` can derive their phases.
# The metrics (EMF, one JSON line per datum) go to a file; the terminal keeps the logs and the
# readiness transitions.
#
#   infra/local/demo.sh                 # 90 s run, logs on stderr, EMF in /tmp/readyprobe-demo/emf.jsonl
#   DURATION=5m DRILL=0 infra/local/demo.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DEMO=/tmp/readyprobe-demo          # must match probes/local-demo.toml
DURATION=${DURATION:-90s}
DRILL=${DRILL:-1}
EMF="$DEMO/emf.jsonl"
BIN="${CARGO_TARGET_DIR:-target}/debug/readyprobe"

command -v cargo >/dev/null || { echo "demo: cargo is required (Rust toolchain)" >&2; exit 1; }
echo "demo: logs and readiness transitions on this terminal; the EMF metrics go to $EMF" >&2
infra/local/mariadb.sh install

if [ -e "$DEMO/state/control-orders-db.json" ]; then
  echo "demo: continuing from the readiness saved by an earlier run in $DEMO/state (rm -rf $DEMO to start from unknown)" >&2
fi
mkdir -p "$DEMO/tls" "$DEMO/state"
if [ ! -f "$DEMO/tls/ca.pem" ]; then
  echo "demo: creating a throwaway CA and server certificates in $DEMO/tls" >&2
  ( cd "$DEMO/tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
      -subj "/CN=readyprobe demo CA" -keyout ca.key -out ca.pem 2>/dev/null
    for b in primary secondary; do
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/CN=mysql-$b.localhost" -keyout "$b.key" -out "$b.csr" 2>/dev/null
      printf 'subjectAltName=DNS:mysql-%s.localhost,IP:127.0.0.1\n' "$b" > "$b.ext"
      openssl x509 -req -in "$b.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$b.ext" -out "$b.pem" 2>/dev/null
    done )
fi
PASSWORD_FILE="$DEMO/password"
[ -f "$PASSWORD_FILE" ] || od -An -tx1 -N12 /dev/urandom | tr -d ' \n' > "$PASSWORD_FILE"
export READYPROBE_MYSQL_PASSWORD; READYPROBE_MYSQL_PASSWORD=$(cat "$PASSWORD_FILE")

echo "demo: starting two MariaDB servers with TLS: primary on 127.0.0.1:23306, secondary on 127.0.0.1:23307" >&2
cleanup() {
  infra/local/mariadb.sh stop "$DEMO/primary"
  infra/local/mariadb.sh stop "$DEMO/secondary"
}
trap cleanup EXIT
# Ports below the kernel's ephemeral range (32768 and up), so an outgoing connection never holds them.
infra/local/mariadb.sh start primary 23306 "$DEMO/primary" "$DEMO/tls/primary.pem" "$DEMO/tls/primary.key" "$DEMO/tls/ca.pem" "$READYPROBE_MYSQL_PASSWORD"
infra/local/mariadb.sh start secondary 23307 "$DEMO/secondary" "$DEMO/tls/secondary.pem" "$DEMO/tls/secondary.key" "$DEMO/tls/ca.pem" "$READYPROBE_MYSQL_PASSWORD"
infra/local/mariadb.sh sql "$DEMO/primary" "SET GLOBAL read_only = OFF"

if [ -x "$BIN" ]; then
  echo "demo: building readyprobe; cargo compiles only what changed (seconds, or minutes if the dependencies were last built for the tests)" >&2
else
  echo "demo: building readyprobe; the first build compiles every dependency and takes several minutes (about 3 min on 2 cores)" >&2
fi
# cargo's own progress (one line per crate, and a progress bar on a terminal) goes to stderr.
cargo build --bin readyprobe
echo "demo: build done ($BIN); checking probes/local-demo.toml" >&2
"$BIN" check --config probes/local-demo.toml >&2

if [ "$DRILL" = 1 ]; then
  # Both branches are declared ready about 15 s in (5 attempts, then the 10 s ready `for`).
  # Timestamped like the prober's log lines, so the two can be read side by side.
  # Each change is marked first (a drill `fault`, then `restore`; the prober copies the marker
  # into its evidence at its next state sync), as docs/drill.md asks of an operator.
  mark() { "$BIN" drill mark --config probes/local-demo.toml --by demo.sh "$@" >&2; }
  ( sleep 25; echo "$(date -u +%FT%T.%3NZ) demo: >>> making the primary read-only (SET GLOBAL read_only = ON)" >&2
    mark --kind fault --label "primary read-only"
    infra/local/mariadb.sh sql "$DEMO/primary" "SET GLOBAL read_only = ON"
    sleep 20; echo "$(date -u +%FT%T.%3NZ) demo: >>> making the primary writable again" >&2
    mark --kind restore --label "primary writable"
    infra/local/mariadb.sh sql "$DEMO/primary" "SET GLOBAL read_only = OFF" ) &
fi
echo "demo: running readyprobe for $DURATION: logs and readiness transitions here, EMF metrics in $EMF, evidence in $DEMO/state/evidence.jsonl" >&2
"$BIN" run --config probes/local-demo.toml --duration "$DURATION" > "$EMF"
echo "demo: done; EMF metrics of this run in $EMF" >&2
echo "demo: its drill report (docs/drill.md): $BIN drill report --evidence $DEMO/state/evidence.jsonl --out $DEMO/report" >&2
