#!/usr/bin/env bash
# Cost per attempt: CPU time (utime+stime from /proc/<pid>/stat) and peak RSS (VmHWM) per 10,000
# attempts of one `readyprobe run` process (release build) per kind (`tcp`, `http`, `mysql`)
# against local targets, with prometheus-blackbox-exporter probing the same `tcp` and `http`
# targets at the same rate in the same run (its load driver's CPU not counted). `mysql` probes two
# throwaway MariaDB servers with TLS and has no blackbox peer. Attempts are counted from the
# evidence, blackbox probes from the driver's answers. Results: $OUT/<kind>/result.json, one line
# per kind on stdout, and a Markdown table at the end. See BENCHMARKS.md, "Cost per attempt".
#
#   bench/attempt_cost.sh                               # tcp, http and mysql
#   KINDS=http STEADY=60 bench/attempt_cost.sh          # a shorter one
#   BASELINE=/tmp/main/readyprobe bench/attempt_cost.sh # and another build beside it, same config
#                                                       # and targets (before/after a change)
set -euo pipefail
cd "$(dirname "$0")/.."
KINDS=${KINDS:-tcp http mysql}
BRANCHES=${BRANCHES:-20}          # branches (BRANCHES/2 services × 2 branches), even
INTERVAL_MS=${INTERVAL_MS:-200}   # ms between the attempts of a branch (20 × 200 ms: 100 a second)
WARMUP=${WARMUP:-30}              # seconds from the `start` record to the steady window
STEADY=${STEADY:-150}             # seconds of the steady window (publish ticks are every 60 s)
SAMPLE=${SAMPLE:-5}               # seconds between /proc samples
OUT=${OUT:-/tmp/readyprobe-cost}
BASE_PORT=${BASE_PORT:-11000}     # tcp targets: BASE_PORT .. BASE_PORT + BRANCHES - 1
HTTP_PORT=${HTTP_PORT:-11800}     # the http target
BB_PORT=${BB_PORT:-20116}         # blackbox_exporter's HTTP port
DB_PORT=${DB_PORT:-23081}         # mysql: the two MariaDB servers on DB_PORT and DB_PORT + 1 (below
                                  # the ephemeral port range, where a connection may hold it)
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/readyprobe}
BASELINE=${BASELINE:-}            # another readyprobe binary run beside BIN in the same run

command -v python3 >/dev/null || { echo "attempt_cost: python3 is required" >&2; exit 1; }
if ! command -v prometheus-blackbox-exporter >/dev/null; then
  echo "attempt_cost: installing prometheus-blackbox-exporter (Debian package)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-blackbox-exporter >/dev/null
fi
if [ ! -x "$BIN" ]; then
  echo "attempt_cost: building $BIN" >&2
  cargo build --release --locked
fi
mkdir -p "$OUT"
cp "$BIN" "$OUT/readyprobe"     # a rebuild during the run does not change what runs
if [ -n "$BASELINE" ]; then cp "$BASELINE" "$OUT/baseline"; fi
# How the table names BIN: the checkout's commit unless BIN_NAME says otherwise (BIN built elsewhere).
COMMIT=${BIN_NAME:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
[ -n "${BIN_NAME:-}" ] || git diff --quiet HEAD -- src 2>/dev/null || COMMIT="$COMMIT+changes"
BASELINE_NAME=${BASELINE_NAME:-$BASELINE}   # how the table names the baseline (e.g. its commit)

pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
dbs=()
cleanup() {
  stop_all
  for d in "${dbs[@]}"; do infra/local/mariadb.sh stop "$d"; done
}
trap cleanup EXIT

# mysql: a throwaway CA and two MariaDB servers with TLS and the canary schema.
source bench/lib.sh

# The config: BRANCHES/2 services under `.localhost` names (loopback without a DNS server), the
# settings of bench/scale.sh but a short interval. tcp: a listening port per branch; http: one
# server for all; mysql: the primary and secondary servers.
write_config() {
  local kind=$1 dir=$2 i
  cat > "$dir/bench.toml" <<EOF
prober_id = "bench"
state_dir = "state"

[readiness]
window = "60s"
min_attempts = 5
initial = "ready"

[publish]
interval = "60s"
sinks = ["emf"]

[probe]
kind = "$kind"
interval = "${INTERVAL_MS}ms"
EOF
  case $kind in
    tcp) printf '\n[probe.tcp]\n' ;;
    http) cat <<EOF

[probe.tls]
ssl_mode = "disabled"

[probe.http]
port = $HTTP_PORT
method = "POST"
path = "/orders"
headers = { "content-type" = "application/json" }
body = '{"canary": "{{marker}}"}'
expect_status = [201]
expect_body_contains = "{{marker}}"
EOF
      ;;
    mysql) cat <<EOF

[probe.tls]
ssl_mode = "verify_identity"
ssl_ca = "$TLS/ca.pem"

[probe.mysql]
user = "readyprobe"
password = { env = "READYPROBE_MYSQL_PASSWORD" }
EOF
      ;;
  esac >> "$dir/bench.toml"
  for ((i = 0; i < BRANCHES / 2; i++)); do
    case $kind in
      # Branch names are unique: the canary row is keyed by (prober_id, branch).
      mysql) printf '[[service]]\nname="svc-%d"\nstable_name="svc-%d.localhost"\nbranch=[{name="p%d",role="PRIMARY",endpoint="mysql-primary.localhost",port=%d},{name="s%d",role="SECONDARY",endpoint="mysql-secondary.localhost",port=%d}]\n' \
        "$i" "$i" "$i" "$DB_PORT" "$i" "$((DB_PORT + 1))" ;;
      tcp) printf '[[service]]\nname="s%d"\nstable_name="s%d.localhost"\nbranch=[{name="p",role="PRIMARY",endpoint="p%d.localhost",port=%d},{name="s",role="SECONDARY",endpoint="q%d.localhost",port=%d}]\n' \
        "$i" "$i" "$i" "$((BASE_PORT + 2 * i))" "$i" "$((BASE_PORT + 2 * i + 1))" ;;
      http) printf '[[service]]\nname="s%d"\nstable_name="s%d.localhost"\nbranch=[{name="p",role="PRIMARY",endpoint="p%d.localhost"},{name="s",role="SECONDARY",endpoint="q%d.localhost"}]\n' \
        "$i" "$i" "$i" "$i" ;;
    esac
  done >> "$dir/bench.toml"
}

# blackbox_exporter's module for the kind (the closest equivalent of readyprobe's probe) and its
# targets, one per branch; returns non-zero for a kind without a blackbox peer.
write_blackbox() {
  local kind=$1 dir=$2 i
  case $kind in
    tcp) printf 'modules:\n  tcp:\n    prober: tcp\n    timeout: 2s\n' ;;
    http) cat <<'EOF'
modules:
  http:
    prober: http
    timeout: 2s
    http:
      method: POST
      headers:
        content-type: application/json
      body: '{"canary": "blackbox"}'
      valid_status_codes: [201]
      fail_if_body_not_matches_regexp: ['"blackbox"']
      preferred_ip_protocol: ip4
EOF
      ;;
    *) return 1 ;;
  esac > "$dir/blackbox.yml"
  for ((i = 0; i < BRANCHES; i++)); do
    case $kind in
      tcp) echo "127.0.0.1:$((BASE_PORT + i))" ;;
      http) echo "http://127.0.0.1:$HTTP_PORT/orders" ;;
    esac
  done > "$dir/targets"
}

run_kind() {
  local kind=$1 dir=$OUT/$1
  rm -rf "$dir"; mkdir -p "$dir"
  [ "$kind" = mysql ] && start_mariadb_pair
  write_config "$kind" "$dir"
  "$OUT/readyprobe" check --config "$dir/bench.toml" >"$dir/check.log" 2>&1 \
    || { echo "attempt_cost: check refused the config: $(tail -5 "$dir/check.log")" >&2; exit 1; }
  local rp bb="" base="" t
  case $kind in
    tcp) python3 bench/scale.py listen "$BASE_PORT" "$BRANCHES" 2>"$dir/target.log" & pids+=("$!") ;;
    http) python3 bench/attempt_cost.py http-target "$HTTP_PORT" 2>"$dir/target.log" & pids+=("$!") ;;
  esac
  if write_blackbox "$kind" "$dir"; then
    prometheus-blackbox-exporter --config.file="$dir/blackbox.yml" \
      --web.listen-address="127.0.0.1:$BB_PORT" 2>"$dir/blackbox.log" &
    bb=$!; pids+=("$bb")
    for _ in $(seq 1 100); do
      grep -q "listening on" "$dir/target.log" && (exec 3<>"/dev/tcp/127.0.0.1/$BB_PORT") 2>/dev/null && break
      sleep 0.2
    done
    grep -q "listening on" "$dir/target.log" || { echo "attempt_cost: the target did not start: $(cat "$dir/target.log")" >&2; exit 1; }
  fi
  ( cd "$dir" && exec "$OUT/readyprobe" run --config bench.toml --duration "$((WARMUP + STEADY + 120))s" ) \
    >/dev/null 2>"$dir/readyprobe.log" &
  rp=$!; pids+=("$rp")
  if [ -n "$BASELINE" ]; then
    # Its own prober id: the mysql canary row is keyed by (prober_id, branch).
    mkdir -p "$dir/baseline"
    sed 's/^prober_id = "bench"/prober_id = "bench-baseline"/' "$dir/bench.toml" > "$dir/baseline/bench.toml"
    ( cd "$dir/baseline" && exec "$OUT/baseline" run --config bench.toml --duration "$((WARMUP + STEADY + 120))s" ) \
      >/dev/null 2>"$dir/baseline.log" &
    base=$!; pids+=("$base")
  fi
  if [ -n "$bb" ]; then
    python3 bench/attempt_cost.py drive "http://127.0.0.1:$BB_PORT" "$kind" "$dir/targets" \
      "$(echo "$INTERVAL_MS" | awk '{print $1 / 1000}')" "$dir/driver.now" 2>"$dir/driver.log" &
    pids+=("$!")
  fi
  for _ in $(seq 1 600); do
    grep -q '"kind":"start"' "$dir/state/evidence.jsonl" 2>/dev/null && break
    kill -0 "$rp" 2>/dev/null || { echo "attempt_cost: readyprobe exited: $(tail -3 "$dir/readyprobe.log")" >&2; exit 1; }
    sleep 0.5
  done
  sleep "$WARMUP"
  echo "attempt_cost: $kind: steady window of ${STEADY}s starts; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  local load=("$(cut -d' ' -f1-3 /proc/loadavg)")
  t=0
  while :; do
    python3 bench/scale.py sample "$rp" >> "$dir/readyprobe.samples"
    if [ -n "$base" ]; then python3 bench/scale.py sample "$base" >> "$dir/baseline.samples"; fi
    if [ -n "$bb" ]; then
      python3 bench/scale.py sample "$bb" >> "$dir/blackbox.samples"
      cat "$dir/driver.now" >> "$dir/driver.marks.all"
    fi
    [ "$t" -ge "$STEADY" ] && break
    sleep "$SAMPLE"; t=$((t + SAMPLE))
  done
  load+=("$(cut -d' ' -f1-3 /proc/loadavg)")
  [ -n "$bb" ] && { head -1 "$dir/driver.marks.all"; tail -1 "$dir/driver.marks.all"; } > "$dir/driver.marks"
  cleanup; dbs=()
  printf '{"kind": "%s", "branches": %d, "interval_ms": %d, "commit": "%s", "baseline": "%s", "load": [%s]}\n' \
    "$kind" "$BRANCHES" "$INTERVAL_MS" "$COMMIT" "$BASELINE_NAME" \
    "$(printf '"%s",' "${load[@]}" | sed 's/,$//')" > "$dir/meta.json"
  python3 bench/attempt_cost.py summary "$dir"
}

{ echo "date $(date -u +%FT%TZ)"; echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo
  echo "commit $COMMIT"; "$OUT/readyprobe" --version 2>/dev/null || true
  prometheus-blackbox-exporter --version 2>&1 | head -1 || true; } > "$OUT/machine.txt"
for k in $KINDS; do run_kind "$k"; done
python3 bench/attempt_cost.py table $(for k in $KINDS; do echo "$OUT/$k"; done)
