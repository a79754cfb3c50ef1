#!/usr/bin/env bash
# Runs the image's final stage without Docker: lays out in a temporary directory the file system
# the Dockerfile's final stage has (the release binary, stripped as the release profile does, the
# shared libraries it links, CA certificates, passwd/group with the distroless `nonroot` user, the
# config the Dockerfile bakes in, /var/lib/readyprobe owned by that user, no shell), then, in a
# private mount namespace with that root read-only and /var/lib/readyprobe a writable volume (as
# ECS runs the task), chroots into it as uid 65532 and:
#   - the baked config (the Dockerfile's CONFIG default, or $CONFIG): with none, the default
#     command must exit 64 naming /etc/readyprobe/readyprobe.toml; with one, `readyprobe check`
#     must name no file missing from the image;
#   - with a test config mounted over /etc/readyprobe (as the ECS templates mount EFS), runs
#     readyprobe check --strict   and   readyprobe run --duration 6s
#     against a TCP listener on 127.0.0.1, with `readyprobe health` (READYPROBE_HEARTBEAT set as
#     the ECS templates set it) failing before the run, passing while it runs and failing after.
# It checks that no /bin/sh exists, that both exit 0, that `run` published Readiness 1 for both
# branches (EMF on stdout) and wrote its evidence as the non-root user. What a container runtime adds (/proc, /dev/null, /dev/urandom, /etc/resolv.conf,
# /etc/hosts) is mounted or written the way Docker does. docs/deploy.md says what this does not
# exercise. Needs root (unshare, chroot) and python3 (the listener).
#
#   infra/image/rootfs-test.sh            # cargo build --release --locked --bin readyprobe first
#   BIN=target/debug/readyprobe infra/image/rootfs-test.sh   # an already built binary
#   CONFIG=probes/x.toml infra/image/rootfs-test.sh          # as with --build-arg CONFIG=...
set -euo pipefail
cd "$(dirname "$0")/../.."

say() { printf 'rootfs-test: %s\n' "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (unshare, chroot)"
if [ -z "${BIN:-}" ]; then
  say "cargo build --release --locked --bin readyprobe (the build stage's command)"
  cargo build --release --locked --bin readyprobe
  BIN=target/release/readyprobe
fi
[ -x "$BIN" ] || fail "$BIN is not an executable"
# The config the Dockerfile bakes in: its `ARG CONFIG=` default unless CONFIG is set.
if [ -z "${CONFIG+set}" ]; then
  CONFIG=$(sed -n 's/^ARG CONFIG=\(.*\)$/\1/p' Dockerfile)
  grep -q '^ARG CONFIG=' Dockerfile || fail "no ARG CONFIG in the Dockerfile"
fi

ROOT=$(mktemp -d /tmp/readyprobe-rootfs.XXXXXX)
CONF=$(mktemp -d /tmp/readyprobe-config.XXXXXX)
chmod 0755 "$CONF"
LISTENER_PID=
cleanup() {
  [ -n "$LISTENER_PID" ] && kill "$LISTENER_PID" 2>/dev/null
  rm -rf "$ROOT" "$CONF" "${STATE:-}"
}
trap cleanup EXIT

# ---------------------------------------------------------------- the final stage's file system
say "laying out the final stage in $ROOT"
source infra/image/layout.sh
layout_final_stage "$ROOT" "$BIN" "$CONFIG"
say "final stage laid out: $(du -sb "$ROOT" | cut -f1) bytes, of which the binary $(stat -c %s "$ROOT/usr/local/bin/readyprobe") (what distroless adds beyond glibc, libgcc and the CA bundle is not here)"

# What the container runtime provides at run time.
mkdir -p "$ROOT/proc" "$ROOT/dev"
touch "$ROOT/dev/null" "$ROOT/dev/urandom"
printf 'nameserver 127.0.0.53\n' >"$ROOT/etc/resolv.conf"
printf '127.0.0.1 localhost\n' >"$ROOT/etc/hosts"

# ---------------------------------------------------------------- a branch to probe
PORT_FILE="$ROOT/.port"
python3 - "$PORT_FILE" <<'PY' &
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(64)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
while True:
    c, _ = s.accept()
    c.close()
PY
LISTENER_PID=$!
for _ in $(seq 50); do [ -s "$PORT_FILE" ] && break; sleep 0.1; done
PORT=$(cat "$PORT_FILE")
rm -f "$PORT_FILE"

# The config mounted over /etc/readyprobe: the tcp kind against the listener, EMF on stdout,
# the file store in the image's /var/lib/readyprobe.
install -D -m 0644 /dev/stdin "$CONF/readyprobe.toml" <<EOF
prober_id = "rootfs-test"
state_dir = "/var/lib/readyprobe"

[service]
name = "rootfs-test"
stable_name = "stable.localhost"

[readiness]
window = "2s"
min_attempts = 5
declare_unready = { success_rate_below = 80.0, for = "1s" }
declare_ready = { success_rate_at_or_above = 95.0, for = "1s" }

[publish]
interval = "1s"
sinks = ["emf"]

[probe]
kind = "tcp"
interval = "200ms"
timeout = "150ms"

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "primary.localhost"
port = $PORT

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "secondary.localhost"
port = $PORT
EOF

for sh in bin/sh bin/bash usr/bin/sh usr/bin/bash; do
  [ ! -e "$ROOT/$sh" ] || fail "$sh exists in the final stage"
done
say "final stage: $(find "$ROOT" -type f | wc -l) files, $(du -sh "$ROOT" | cut -f1), no shell"

# ---------------------------------------------------------------- run it as the image would
# A private mount namespace, as ECS runs the task: the root file system read-only
# (readonlyRootFilesystem), /var/lib/readyprobe a separate writable volume that starts as a copy
# of the image's directory with its owner (what Fargate does for a VOLUME path), /proc and the two
# device nodes bind-mounted. All of it vanishes with the namespace. The process gets a clean
# environment; env and chroot run outside the root, so nothing is added to it.
STATE=$(mktemp -d /tmp/readyprobe-volume.XXXXXX)
chown 65532:65532 "$STATE" && chmod 0750 "$STATE"
# With MOUNT_CONFIG=1, the test config's directory is mounted read-only over /etc/readyprobe.
in_image() {
  unshare --mount --propagation private -- /bin/bash -c '
    root=$1 state=$2 conf=$3; shift 3
    mount --bind "$root" "$root"
    mount -o remount,bind,ro "$root"
    mount --bind "$state" "$root/var/lib/readyprobe"
    [ -z "$conf" ] || mount --bind -o ro "$conf" "$root/etc/readyprobe"
    mount -t proc proc "$root/proc"
    mount --bind /dev/null "$root/dev/null"
    mount --bind /dev/urandom "$root/dev/urandom"
    exec /usr/bin/env -i PATH=/usr/local/bin HOME=/home/nonroot HOSTNAME=rootfs-test \
      READYPROBE_HEARTBEAT=/var/lib/readyprobe/heartbeat \
      /usr/sbin/chroot --userspec=65532:65532 "$root" "$@"
  ' in_image "$ROOT" "$STATE" "$([ "${MOUNT_CONFIG:-}" = 1 ] && echo "$CONF")" "$@"
}

# ---------------------------------------------------------------- the baked config
if [ -z "$CONFIG" ]; then
  say "no config baked in: the default command must exit 64 naming the config file"
  rc=0
  err=$(in_image /usr/local/bin/readyprobe run --config /etc/readyprobe/readyprobe.toml 2>&1 >/dev/null) \
    || rc=$?
  [ "$rc" = 64 ] || { printf '%s\n' "$err" >&2; fail "run without a config exited $rc, not 64"; }
  case $err in
    *'/etc/readyprobe/readyprobe.toml'*) say "ok: exit 64, ${err##*$'\n'  }" ;;
    *) printf '%s\n' "$err" >&2; fail "run without a config does not name /etc/readyprobe/readyprobe.toml" ;;
  esac
else
  say "readyprobe check on the baked $CONFIG: every file it names must be in the image"
  out=$(in_image /usr/local/bin/readyprobe check --config /etc/readyprobe/readyprobe.toml 2>&1) \
    || { printf '%s\n' "$out" >&2; fail "check of the baked $CONFIG failed"; }
  # A problem with a file reads "warning: <keys>: <path> ..." or "...: file <path> ...".
  missing=$(printf '%s\n' "$out" | grep -E '^warning: [^ ]+: (file )?/' || true)
  [ -z "$missing" ] || { printf '%s\n' "$missing" >&2; fail "the baked $CONFIG names files the image lacks"; }
fi

export MOUNT_CONFIG=1
say "readyprobe check --strict (as uid 65532 under chroot, the test config mounted)"
in_image /usr/local/bin/readyprobe check --strict --config /etc/readyprobe/readyprobe.toml >/dev/null \
  || fail "check --strict exited $?"

# The health check as the ECS templates wire it: exec form, READYPROBE_HEARTBEAT from the task.
rc=0
err=$(in_image /usr/local/bin/readyprobe health 2>&1 >/dev/null) || rc=$?
[ "$rc" = 1 ] || fail "health before any run exited $rc, not 1"
say "ok: health before any run exits 1: $err"

say "readyprobe run --duration 6s (as uid 65532 under chroot), and health while it runs"
OUT=$(mktemp)
in_image /usr/local/bin/readyprobe run --config /etc/readyprobe/readyprobe.toml --duration 6s \
  >"$OUT" 2>"$OUT.err" &
RUN_PID=$!
healthy=
for _ in $(seq 50); do
  if line=$(in_image /usr/local/bin/readyprobe health 2>&1); then healthy=$line; break; fi
  sleep 0.1
done
run_rc=0
wait "$RUN_PID" || run_rc=$?
[ "$run_rc" = 0 ] || { cat "$OUT.err" >&2; rm -f "$OUT" "$OUT.err"; fail "run exited $run_rc"; }
[ -n "$healthy" ] || fail "health never exited 0 while run ran (last: $line)"
say "ok: health while run ran: $healthy"
[ "$(stat -c %u "$STATE/heartbeat")" = 65532 ] || fail "heartbeat not owned by uid 65532"
sleep 1.5
rc=0
err=$(in_image /usr/local/bin/readyprobe health --max-age 1s 2>&1 >/dev/null) || rc=$?
[ "$rc" = 1 ] || fail "health after the run ended exited $rc, not 1"
say "ok: health after the run ended exits 1: $err"

ready() {
  python3 - "$OUT" "$1" <<'PY'
import json, sys
path, branch = sys.argv[1], sys.argv[2]
values = [d.get("Readiness") for d in map(json.loads, open(path)) if d.get("Branch") == branch]
sys.exit(0 if 1 in values else 1)
PY
}
for b in primary secondary; do
  ready "$b" || { tail -n 20 "$OUT.err" >&2; rm -f "$OUT" "$OUT.err"; fail "no Readiness 1 for $b on stdout"; }
done
ev="$STATE/evidence.jsonl"
[ -s "$ev" ] || fail "no evidence written"
[ "$(stat -c %u "$ev")" = 65532 ] || fail "evidence not owned by uid 65532"
say "ok: check --strict and run exit 0 as uid 65532; Readiness 1 for both branches; $(wc -l <"$ev") evidence records"
rm -f "$OUT" "$OUT.err"
