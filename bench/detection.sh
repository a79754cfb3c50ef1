#!/usr/bin/env bash
# Detection latency on real components: the time from a fault on a branch's writer to the
# `Readiness` 0 datum the CloudWatch emulator (LocalStack) accepted, over RUNS runs per fault kind,
# with the release binary. One MariaDB (TLS, the canary schema and its least-privilege identity)
# runs inside a network namespace of its own, joined to this one by a veth pair; a dnsmasq on
# loopback answers the branch's name with the namespace's address. Fault kinds:
#   readonly   `SET GLOBAL read_only = ON` (definitive: `server_read_only`; definitive_for applies)
#   blackhole  an nftables `drop` rule on the port inside the namespace (ambiguous: `tcp_timeout`;
#              declare_unready.for applies)
# Each run starts a fresh `readyprobe run` (new state_dir, `readiness.initial = "ready"`, its own
# CloudWatch namespace), probes the healthy writer for WARM seconds (the window full), waits a
# random part of an interval, applies the fault, and waits for the transition's `publish` record;
# then it stops the prober and restores the fault. bench/detection.py measures and summarises.
# Results: $OUT/<kind>-<i>/result.json, $OUT/summary.md. See BENCHMARKS.md.
#
#   bench/detection.sh                          # both kinds, 5 runs each
#   KINDS=readonly RUNS=7 bench/detection.sh
#   FOR=60s bench/detection.sh                  # a longer declare_unready.for
set -euo pipefail
cd "$(dirname "$0")/.."
KINDS=${KINDS:-readonly blackhole}
RUNS=${RUNS:-5}
INTERVAL=${INTERVAL:-2s}          # probe.interval (timeout and jitter: their defaults)
FOR=${FOR:-30s}                   # declare_unready.for
DEFINITIVE_FOR=${DEFINITIVE_FOR:-20s}
WINDOW=${WINDOW:-60s}             # readiness.window (min_attempts 10)
WARM=${WARM:-64}                  # seconds of healthy probing before the fault
ENDPOINT=${ENDPOINT:-http://127.0.0.1:4566}
OUT=${OUT:-/tmp/readyprobe-detection}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/readyprobe}
TAG=${TAG:-$$}                    # names of this run's namespace, links and metric namespaces
NET=${NET:-10.200.$(($$ % 250))}  # the veth pair's /30: NET.1 (here), NET.2 (the namespace)
DNS_PORT=${DNS_PORT:-$((25000 + $$ % 5000))}
DB_PORT=3306
NAME=mysql-primary.detect.test    # the branch endpoint dnsmasq answers

for kind in $KINDS; do
  case $kind in readonly | blackhole) ;; *) echo "detection: unknown kind $kind (readonly, blackhole)" >&2; exit 64 ;; esac
done
for tool in ip nft dnsmasq openssl python3; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
    echo "detection: $tool is required (Debian: iproute2, nftables, dnsmasq-base, openssl)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "detection: network namespaces need root" >&2; exit 1; }
if ip -4 addr show | grep -q "inet $NET\."; then
  echo "detection: $NET.0/30 is in use here; set NET=10.200.N" >&2; exit 1
fi
curl -fsS -m 5 "$ENDPOINT/_localstack/health" >/dev/null \
  || { echo "detection: no emulator at $ENDPOINT (.ci/localstack.sh start)" >&2; exit 1; }
# boto3 reads the emulator back (the cross-check); a venv of its own when it is absent.
PY=python3
if ! python3 -c 'import boto3' 2>/dev/null; then
  [ -x "$OUT/venv/bin/python" ] || python3 -m venv "$OUT/venv"
  "$OUT/venv/bin/python" -m pip install --quiet boto3
  PY=$OUT/venv/bin/python
fi
if [ ! -x "$BIN" ]; then
  echo "detection: building $BIN" >&2
  cargo build --release --locked
fi
mkdir -p "$OUT"
cp "$BIN" "$OUT/readyprobe"     # a rebuild during the run does not change what runs
infra/local/mariadb.sh install

NS=rpdet-$TAG
DB=$OUT/db
dns_pid=""
cleanup() {
  [ -n "$dns_pid" ] && kill "$dns_pid" 2>/dev/null
  infra/local/mariadb.sh stop "$DB" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true   # removes both veth ends
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The namespace: veth pair, loopback up, the far end NET.2.
ip netns add "$NS"
ip link add "rpd${TAG}a" type veth peer name "rpd${TAG}b"
ip link set "rpd${TAG}b" netns "$NS"
ip addr add "$NET.1/30" dev "rpd${TAG}a"
ip link set "rpd${TAG}a" up
ip -n "$NS" addr add "$NET.2/30" dev "rpd${TAG}b"
ip -n "$NS" link set "rpd${TAG}b" up
ip -n "$NS" link set lo up

# A throwaway CA and the server's certificate for the branch name.
TLS=$OUT/tls
mkdir -p "$TLS"
( cd "$TLS"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=readyprobe detection CA" -keyout ca.key -out ca.pem 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=$NAME" -keyout server.key -out server.csr 2>/dev/null
  printf 'subjectAltName=DNS:%s\n' "$NAME" > server.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile server.ext -out server.pem 2>/dev/null )

export READYPROBE_MYSQL_PASSWORD; READYPROBE_MYSQL_PASSWORD=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
rm -rf "$DB"
MARIADB_BIND=$NET.2 ip netns exec "$NS" infra/local/mariadb.sh start primary "$DB_PORT" "$DB" \
  "$TLS/server.pem" "$TLS/server.key" "$TLS/ca.pem" "$READYPROBE_MYSQL_PASSWORD"

dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces \
  --listen-address=127.0.0.1 --port="$DNS_PORT" --address="/$NAME/$NET.2" --user=root \
  --log-facility=- 2>"$OUT/dnsmasq.log" &
dns_pid=$!

write_config() {
  local dir=$1 namespace=$2
  cat > "$dir/detect.toml" <<EOF
prober_id = "detect"
state_dir = "state"

[service]
name = "detect-db"
stable_name = "mysql.detect.test"

[readiness]
window = "$WINDOW"
min_attempts = 10
initial = "ready"
declare_unready = { success_rate_below = 95.0, for = "$FOR", definitive_for = "$DEFINITIVE_FOR" }

[publish]
interval = "60s"
namespace = "$namespace"
sinks = ["cloudwatch"]

[publish.cloudwatch]
region = "us-east-1"
endpoint_url = "$ENDPOINT"

[dns]
nameservers = ["127.0.0.1:$DNS_PORT"]

[probe]
kind = "mysql"
interval = "$INTERVAL"

[probe.tls]
ssl_mode = "verify_identity"
ssl_ca = "$TLS/ca.pem"

[probe.mysql]
user = "readyprobe"
password = { env = "READYPROBE_MYSQL_PASSWORD" }

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "$NAME"
port = $DB_PORT
EOF
}

sql() { infra/local/mariadb.sh sql "$DB" "$1"; }
fault_cmd() {
  case $1 in
    readonly) echo "infra/local/mariadb.sh sql '$DB' 'SET GLOBAL read_only = ON'" ;;
    blackhole) echo "ip netns exec $NS nft -f - <<< 'table inet rpdetect { chain input { type filter hook input priority 0; tcp dport $DB_PORT drop; }; }'" ;;
  esac
}
restore() {
  case $1 in
    readonly) sql "SET GLOBAL read_only = OFF" ;;
    blackhole) ip netns exec "$NS" nft delete table inet rpdetect 2>/dev/null || true ;;
  esac
}

export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
export AWS_EC2_METADATA_DISABLED=true
{ echo "date $(date -u +%FT%TZ)"; echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo
  echo "load $(cut -d' ' -f1-3 /proc/loadavg)"; "$OUT/readyprobe" --version 2>/dev/null || true
  echo "interval $INTERVAL window $WINDOW for $FOR definitive_for $DEFINITIVE_FOR warm ${WARM}s"; } > "$OUT/machine.txt"
failed=0
for kind in $KINDS; do
  for i in $(seq 1 "$RUNS"); do
    dir=$OUT/$kind-$i
    rm -rf "$dir"; mkdir -p "$dir"
    write_config "$dir" "ReadyprobeDetect/$TAG-$kind-$i"
    restore "$kind"
    "$PY" bench/detection.py run --kind "$kind" --dir "$dir" --bin "$OUT/readyprobe" \
      --fault "$(fault_cmd "$kind")" --warm "$WARM" --endpoint "$ENDPOINT" \
      --localstack-log "${LOCALSTACK_LOG:-/var/cache/readyprobe/localstack-venv/run/localstack-4566.log}" \
      || { echo "detection: $kind run $i failed (see $dir)" >&2; failed=$((failed + 1)); }
    restore "$kind"
  done
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end" >> "$OUT/machine.txt"
"$PY" bench/detection.py summary "$OUT" | tee "$OUT/summary.md"
[ "$failed" = 0 ] || { echo "detection: $failed run(s) failed" >&2; exit 1; }
