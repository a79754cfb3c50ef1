#!/usr/bin/env bash
# Scale benchmark: N branches (N/2 services × 2 branches) in ONE `readyprobe run` process at a 10 s
# interval against local targets, with prometheus-blackbox-exporter probing the same targets at the
# same rate in the same run (kind tcp). Per size it measures, over a steady window after a warm-up:
# CPU per attempt (utime+stime from /proc/<pid>/stat ÷ attempts started in the window, counted from
# the evidence), RSS, VmHWM, threads, schedule jitter per branch (|gap between consecutive attempt
# starts − interval|) and the datums of each publish tick's batch (`publish` evidence records).
# With SERVE=1 the config has `[serve]` and, through the steady window, a scraper GETs `/metrics`
# every SCRAPE s with Prometheus's Accept header and records each answer's bytes, series and time
# to the last byte (its CPU is not counted).
# Results: $OUT/<kind>-<N>[-serve]/result.json, and one line per size on stdout. See BENCHMARKS.md.
#
#   bench/scale.sh                                   # tcp: 10, 100, 1000, 10000 branches
#   SIZES="10 100" KIND=mysql bench/scale.sh         # mysql with TLS on two throwaway MariaDB servers
#   SIZES=1000 WARMUP=15 STEADY=60 bench/scale.sh    # a shorter one
#   SIZES="1000 10000" SERVE=1 bench/scale.sh        # with /metrics scraped every 15 s
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-10 100 1000 10000}
KIND=${KIND:-tcp}                 # tcp | mysql
INTERVAL=${INTERVAL:-10}          # seconds between the attempts of a branch
WARMUP=${WARMUP:-30}              # seconds from the `start` record to the steady window
STEADY=${STEADY:-120}             # seconds of the steady window (publish ticks are every 60 s)
JITTER=${JITTER:-}                # probe.jitter (spread of the first attempts); empty: the default
SAMPLE=${SAMPLE:-5}               # seconds between /proc samples
SERVE=${SERVE:-}                  # non-empty: [serve] on SERVE_PORT, /metrics scraped every SCRAPE s
SERVE_PORT=${SERVE_PORT:-20116}
SCRAPE=${SCRAPE:-15}              # Prometheus's scrape_interval in docs/prometheus.md
OUT=${OUT:-/tmp/readyprobe-bench}
BASE_PORT=${BASE_PORT:-10000}     # tcp targets: BASE_PORT .. BASE_PORT + N - 1
BB_PORT=${BB_PORT:-20115}         # blackbox_exporter's HTTP port
DB_PORT=${DB_PORT:-23071}         # mysql: the two MariaDB servers on DB_PORT and DB_PORT + 1
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/readyprobe}
HERE=$(pwd)

command -v python3 >/dev/null || { echo "scale: python3 is required" >&2; exit 1; }
if [ "$KIND" = tcp ] && ! command -v prometheus-blackbox-exporter >/dev/null; then
  echo "scale: installing prometheus-blackbox-exporter (Debian package)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-blackbox-exporter >/dev/null
fi
if [ ! -x "$BIN" ]; then
  echo "scale: building $BIN" >&2
  cargo build --release --locked
fi
mkdir -p "$OUT"
cp "$BIN" "$OUT/readyprobe"     # a rebuild during the run does not change what runs
ulimit -n "$(ulimit -Hn)"

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

# mysql: a throwaway CA, two MariaDB servers with TLS and the canary schema.
source bench/lib.sh
if [ "$KIND" = mysql ]; then
  start_mariadb_pair
fi

# The config: N/2 services, shared settings at the top. Names under `.localhost` resolve to
# loopback without a DNS server. tcp: one listening port per branch.
write_config() {
  local n=$1 dir=$2 i
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

EOF
  if [ -n "$SERVE" ]; then printf '[serve]\nlisten = "127.0.0.1:%d"\n\n' "$SERVE_PORT" >> "$dir/bench.toml"; fi
  cat >> "$dir/bench.toml" <<EOF
[probe]
kind = "$KIND"
interval = "${INTERVAL}s"
timeout = "2s"
EOF
  if [ -n "$JITTER" ]; then echo "jitter = \"$JITTER\"" >> "$dir/bench.toml"; fi
  if [ "$KIND" = tcp ]; then
    printf '\n[probe.tcp]\n' >> "$dir/bench.toml"   # every branch has its own port
  else
    cat >> "$dir/bench.toml" <<EOF

[probe.tls]
ssl_mode = "verify_identity"
ssl_ca = "$TLS/ca.pem"

[probe.mysql]
user = "readyprobe"
password = { env = "READYPROBE_MYSQL_PASSWORD" }
EOF
  fi
  # Inline branch tables: a config is refused above 1 MiB, and the [[service.branch]] form of
  # 5,000 services exceeds it (hence the short names).
  for ((i = 0; i < n / 2; i++)); do
    if [ "$KIND" = mysql ]; then
      # Branch names are unique: the canary row is keyed by (prober_id, branch).
      printf '[[service]]\nname="svc-%d"\nstable_name="svc-%d.localhost"\nbranch=[{name="p%d",role="PRIMARY",endpoint="mysql-primary.localhost",port=%d},{name="s%d",role="SECONDARY",endpoint="mysql-secondary.localhost",port=%d}]\n' \
        "$i" "$i" "$i" "$DB_PORT" "$i" "$((DB_PORT + 1))"
    else
      printf '[[service]]\nname="s%d"\nstable_name="s%d.localhost"\nbranch=[{name="p",role="PRIMARY",endpoint="p%d.localhost",port=%d},{name="s",role="SECONDARY",endpoint="q%d.localhost",port=%d}]\n' \
        "$i" "$i" "$i" "$((BASE_PORT + 2 * i))" "$i" "$((BASE_PORT + 2 * i + 1))"
    fi
  done >> "$dir/bench.toml"
}

run_size() {
  local n=$1 dir=$OUT/$KIND-$1${SERVE:+-serve}
  rm -rf "$dir"; mkdir -p "$dir"
  write_config "$n" "$dir"
  local rp bb="" drv="" t
  if [ "$KIND" = tcp ]; then
    python3 bench/scale.py listen "$BASE_PORT" "$n" 2>"$dir/listen.log" &
    pids+=("$!")
    printf 'modules:\n  tcp:\n    prober: tcp\n    timeout: 2s\n' > "$dir/blackbox.yml"
    prometheus-blackbox-exporter --config.file="$dir/blackbox.yml" \
      --web.listen-address="127.0.0.1:$BB_PORT" 2>"$dir/blackbox.log" &
    bb=$!; pids+=("$bb")
    for _ in $(seq 1 100); do
      grep -q "listening on" "$dir/listen.log" && (exec 3<>"/dev/tcp/127.0.0.1/$BB_PORT") 2>/dev/null && break
      sleep 0.2
    done
    grep -q "listening on" "$dir/listen.log" || { echo "scale: the listeners did not start: $(cat "$dir/listen.log")" >&2; exit 1; }
  fi
  ( cd "$dir" && exec "$OUT/readyprobe" run --config bench.toml --duration "$((WARMUP + STEADY + 120))s" ) \
    >/dev/null 2>"$dir/readyprobe.log" &
  rp=$!; pids+=("$rp")
  if [ -n "$bb" ]; then
    python3 bench/scale.py drive "http://127.0.0.1:$BB_PORT" "$n" "$BASE_PORT" "$INTERVAL" "$dir/driver.now" 2>"$dir/driver.log" &
    drv=$!; pids+=("$drv")
  fi
  for _ in $(seq 1 600); do
    grep -q '"kind":"start"' "$dir/state/evidence.jsonl" 2>/dev/null && break
    kill -0 "$rp" 2>/dev/null || { echo "scale: readyprobe exited: $(tail -3 "$dir/readyprobe.log")" >&2; exit 1; }
    sleep 0.5
  done
  if [ -n "$SERVE" ]; then
    grep -q "serving /metrics on" "$dir/readyprobe.log" || { echo "scale: no 'serving /metrics' line: $(tail -3 "$dir/readyprobe.log")" >&2; exit 1; }
  fi
  sleep "$WARMUP"
  echo "scale: $KIND, $n branches${SERVE:+, serve}: steady window of ${STEADY}s starts; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  if [ -n "$SERVE" ]; then
    python3 bench/scale.py scrape "http://127.0.0.1:$SERVE_PORT/metrics" "$SCRAPE" "$dir/scrapes.jsonl" 2>"$dir/scrape.log" &
    pids+=("$!")
  fi
  local load=("$(cut -d' ' -f1-3 /proc/loadavg)")
  t=0
  while :; do
    python3 bench/scale.py sample "$rp" >> "$dir/readyprobe.samples"
    if [ -n "$bb" ]; then
      python3 bench/scale.py sample "$bb" >> "$dir/blackbox.samples"
      { cat "$dir/driver.now"; } >> "$dir/driver.marks.all"
    fi
    [ "$t" -ge "$STEADY" ] && break
    sleep "$SAMPLE"; t=$((t + SAMPLE))
    [ $((t % 60)) = 0 ] && load+=("$(cut -d' ' -f1-3 /proc/loadavg)")
  done
  [ -n "$bb" ] && { head -1 "$dir/driver.marks.all"; tail -1 "$dir/driver.marks.all"; } > "$dir/driver.marks"
  stop_all
  printf '{"kind": "%s", "branches": %d, "interval_s": %d, "jitter": "%s", "serve": %s, "load": [%s]}\n' \
    "$KIND" "$n" "$INTERVAL" "${JITTER:-default}" "$([ -n "$SERVE" ] && echo true || echo false)" \
    "$(printf '"%s",' "${load[@]}" | sed 's/,$//')" > "$dir/meta.json"
  python3 bench/scale.py summary "$dir"
}

{ echo "date $(date -u +%FT%TZ)"; echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo
  grep MemTotal /proc/meminfo; "$OUT/readyprobe" --version 2>/dev/null || true
  prometheus-blackbox-exporter --version 2>&1 | head -1 || true; } > "$OUT/machine-$KIND.txt"
for n in $SIZES; do run_size "$n"; done
