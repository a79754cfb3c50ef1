#!/usr/bin/env bash
# Soak run: PROCS `readyprobe run` processes × 2 branches of kind `tcp` at a short interval against
# local TCP listeners (one port per branch; names under `.localhost`, answered by the resolver
# itself), for DURATION seconds. Every SAMPLE seconds it reads each process's RSS and open file
# descriptors from /proc; at the end it computes the schedule drift from the evidence's attempt
# start times and prints a summary.
#
#   infra/local/soak.sh                         # 10 processes × 2 branches, 100 ms, 600 s, release build
#   DURATION=60 PROCS=2 infra/local/soak.sh     # a short one
#
# Drift: each branch's attempts should start on a grid `first start + k × interval` (missed ticks are
# skipped, never bunched). `offset` is each start's distance from the nearest grid point; `gap` is
# the time between consecutive starts minus the interval. Both in % of the interval; the evidence
# has millisecond times, so 1 ms is the resolution. Skipped ticks (a gap of 1.5 intervals or more)
# are counted.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${DURATION:-600}       # seconds
INTERVAL_MS=${INTERVAL_MS:-100}
PROCS=${PROCS:-10}
SAMPLE=${SAMPLE:-5}             # seconds between /proc samples
OUT=${OUT:-/tmp/readyprobe-soak}
BASE_PORT=${BASE_PORT:-41000}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/readyprobe}

if [ ! -x "$BIN" ]; then
  echo "soak: building $BIN" >&2
  cargo build --release --locked
fi
command -v python3 >/dev/null || { echo "soak: python3 is required (listeners and summary)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"
# The binary is copied so a rebuild during the run does not change what runs.
cp "$BIN" "$OUT/readyprobe"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${LISTENER:-}" ] && kill "$LISTENER" 2>/dev/null || true
}
trap cleanup EXIT

# One asyncio process accepts on every branch's port and closes each connection at once.
python3 - "$BASE_PORT" "$((PROCS * 2))" <<'EOF' &
import asyncio, sys
base, n = int(sys.argv[1]), int(sys.argv[2])
async def close(reader, writer):
    writer.close()
async def main():
    servers = [await asyncio.start_server(close, "127.0.0.1", base + i, backlog=256) for i in range(n)]
    await asyncio.gather(*(s.serve_forever() for s in servers))
asyncio.run(main())
EOF
LISTENER=$!
sleep 1
kill -0 "$LISTENER" || { echo "soak: the TCP listeners did not start (ports $BASE_PORT+ in use?)" >&2; exit 1; }

for i in $(seq 0 $((PROCS - 1))); do
  d="$OUT/p$i"
  mkdir -p "$d"
  cat > "$d/soak.toml" <<EOF
prober_id = "soak-$i"
state_dir = "state"

[service]
name = "soak-$i"
stable_name = "soak-$i.localhost"

[readiness]
window = "10s"
min_attempts = 5

[publish]
interval = "10s"
sinks = ["emf"]

[state]
poll_interval = "5s"

[probe]
kind = "tcp"
interval = "${INTERVAL_MS}ms"
timeout = "$((INTERVAL_MS * 8 / 10))ms"

[probe.tcp]
port = $((BASE_PORT + 2 * i))

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "p$i.localhost"
port = $((BASE_PORT + 2 * i))

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "s$i.localhost"
port = $((BASE_PORT + 2 * i + 1))
EOF
  "$OUT/readyprobe" run --duration "${DURATION}s" --config "$d/soak.toml" >/dev/null 2>"$d/stderr.log" &
  pids+=("$!")
done
echo "soak: $PROCS processes × 2 branches every ${INTERVAL_MS} ms for ${DURATION} s; pids ${pids[*]}; output in $OUT" >&2
echo "load_start $(cat /proc/loadavg)" > "$OUT/load.txt"

echo "t_s pid rss_kb fds" > "$OUT/samples.txt"
start=$(date +%s)
while :; do
  alive=0
  now=$(( $(date +%s) - start ))
  for p in "${pids[@]}"; do
    [ -r "/proc/$p/status" ] || continue
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
    fds=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
    [ -n "$rss" ] && { echo "$now $p $rss $fds" >> "$OUT/samples.txt"; alive=1; }
  done
  [ "$alive" = 1 ] || break
  sleep "$SAMPLE"
done
echo "load_end $(cat /proc/loadavg)" >> "$OUT/load.txt"
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
[ "$status" = 0 ] || echo "soak: a readyprobe process exited with $status (see $OUT/p*/stderr.log)" >&2

python3 - "$OUT" "$PROCS" "$INTERVAL_MS" <<'EOF'
import json, sys, collections
out, procs, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [l.split() for l in open(f"{out}/samples.txt").read().splitlines()[1:]]
by_pid = collections.defaultdict(list)
for t, pid, rss, fds in rows:
    by_pid[pid].append((int(t), int(rss), int(fds)))
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")
first = [v[0] for v in by_pid.values()]
last = [v[-1] for v in by_pid.values()]
print(f"soak: {procs} processes × 2 branches, interval {interval} ms, {len(rows)} samples")
for name, i in (("RSS KiB", 1), ("open fds", 2)):
    peak = max(s[i] for v in by_pid.values() for s in v)
    print(f"  {name:9} per process: start {min(s[i] for s in first)}..{max(s[i] for s in first)}, "
          f"end {min(s[i] for s in last)}..{max(s[i] for s in last)}, max {peak}")
print(f"  samples at t = {min(s[0] for s in first)} s and t = {max(s[0] for s in last)} s")
offsets, gaps, skipped, attempts, failed, bad_lines = [], [], 0, 0, 0, 0
for i in range(procs):
    starts = collections.defaultdict(list)
    for line in open(f"{out}/p{i}/state/evidence.jsonl"):
        try:
            r = json.loads(line)
        except ValueError:
            bad_lines += 1
            continue
        if r.get("kind") == "attempt":
            attempts += 1
            failed += r.get("result") != "success"
            starts[r["branch"]].append(r["started_at"])
    for s in starts.values():
        s.sort()
        for a, b in zip(s, s[1:]):
            g = b - a
            if g >= 1.5 * interval:
                skipped += round(g / interval) - 1
            else:
                gaps.append(abs(g - interval) * 100 / interval)
        for t in s:
            k = round((t - s[0]) / interval)
            offsets.append(abs(t - s[0] - k * interval) * 100 / interval)
print(f"  attempts {attempts} (failed {failed}), skipped ticks {skipped}, unparsable evidence lines {bad_lines}")
for name, xs in (("offset from the grid", offsets), ("gap − interval", gaps)):
    print(f"  drift, {name}: p50 {pct(xs, .5):.1f}%  p99 {pct(xs, .99):.1f}%  max {max(xs):.1f}% of {interval} ms")
print("  " + open(f"{out}/load.txt").read().replace("\n", "\n  ").rstrip())
EOF
exit "$status"
