#!/usr/bin/env bash
# Memory across reloads: one `readyprobe run` with N services (2 tcp branches each, 10 s interval)
# gets CYCLES SIGHUPs, each swapping the second half of its services for other ones (removed
# services stop, new ones start). After each reload and a pause it prints VmHWM and VmRSS (kB) and
# the thread count; at the end, the `reload` records and how long the reloads took. See BENCHMARKS.md.
#
#   bench/reload.sh                         # 500 services, 20 reloads, 15 s apart
#   N=100 CYCLES=5 PAUSE=5 bench/reload.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-500}; CYCLES=${CYCLES:-20}; PAUSE=${PAUSE:-15}
BASE_PORT=${BASE_PORT:-30000}     # targets: BASE_PORT .. BASE_PORT + 4N - 1
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/readyprobe}
OUT=${OUT:-/tmp/readyprobe-bench/reload}
HERE=$(pwd)
[ -x "$BIN" ] || { echo "reload: building $BIN" >&2; cargo build --release --locked; }
rm -rf "$OUT"; mkdir -p "$OUT"
cp "$BIN" "$OUT/readyprobe"
ulimit -n "$(ulimit -Hn)"
python3 bench/scale.py listen "$BASE_PORT" $((N * 4)) 2>"$OUT/listen.log" &
pids=("$!")
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

config() { # $1: what the second half's service numbers are shifted by
  printf 'prober_id = "reload-bench"\nstate_dir = "state"\n[readiness]\nwindow = "60s"\nmin_attempts = 5\ninitial = "ready"\n'
  printf '[publish]\ninterval = "60s"\nsinks = ["emf"]\n[probe]\nkind = "tcp"\ninterval = "10s"\ntimeout = "2s"\n[probe.tcp]\n'
  for ((i = 0; i < N; i++)); do
    k=$i; [ "$i" -ge $((N / 2)) ] && k=$((i + $1))
    printf '[[service]]\nname="s%d"\nstable_name="s%d.localhost"\nbranch=[{name="p",role="PRIMARY",endpoint="p%d.localhost",port=%d},{name="s",role="SECONDARY",endpoint="q%d.localhost",port=%d}]\n' \
      "$k" "$k" "$k" $((BASE_PORT + 2 * k)) "$k" $((BASE_PORT + 2 * k + 1))
  done
}
config 0 > "$OUT/a.toml"; config "$N" > "$OUT/b.toml"; cp "$OUT/a.toml" "$OUT/run.toml"
for _ in $(seq 1 50); do grep -q "listening on" "$OUT/listen.log" && break; sleep 0.2; done
( cd "$OUT" && exec ./readyprobe run --config run.toml ) >/dev/null 2>"$OUT/readyprobe.log" &
rp=$!; pids+=("$rp")
sleep 20
mem() { awk '/VmRSS|VmHWM/{printf "%s %s kB, ", $1, $2}' "/proc/$rp/status"; echo "threads $(ls "/proc/$rp/task" | wc -l)"; }
echo "before the first reload: $(mem)"
for ((c = 1; c <= CYCLES; c++)); do
  if [ $((c % 2)) = 1 ]; then cp "$OUT/b.toml" "$OUT/run.toml"; else cp "$OUT/a.toml" "$OUT/run.toml"; fi
  kill -HUP "$rp"; sleep "$PAUSE"
  echo "reload $c: $(mem)"
done
echo "reload records: $(grep -c '"kind":"reload"' "$OUT/state/evidence.jsonl" || true)"
# How long each reload took, from its "preparing" log line to its "applied" one.
python3 - "$OUT/readyprobe.log" <<'PY'
import datetime, sys
def at(line):
    return datetime.datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
start, took = None, []
for line in open(sys.argv[1], errors="replace"):
    if "reload: preparing" in line:
        start = at(line)
    elif "reload applied" in line and start is not None:
        took.append((at(line) - start).total_seconds() * 1000)
        start = None
if took:
    took.sort()
    print(f"reload took (ms, preparing to applied): min {took[0]:.0f}, median {took[len(took) // 2]:.0f}, max {took[-1]:.0f}")
PY
cd "$HERE"
