#!/usr/bin/env bash
# Builds the image where no registry image can be pulled (the Dockerfile's `rust` and distroless
# bases), and runs it: buildah assembles the final stage `FROM scratch` from an already built
# binary (infra/image/layout.sh: the stripped binary, the shared libraries `ldd` names, copied from
# this Debian 12 machine, the CA bundle, distroless's passwd and group, /var/lib/readyprobe owned
# by 65532, no shell) with the Dockerfile's user, entry point, command, volume, heartbeat variable
# and health check; then podman runs it (vfs storage, rootful, no daemon, no network): `--version`,
# the default command without a config (exit 64), and `run` beside `health` in the same container.
# It prints the image's size and the stripped binary's. Not the Dockerfile's build (its stages,
# the distroless base's own files): infra/image/build.sh is that. Needs root, buildah and podman
# (Debian packages).
#
#   cargo build --release --locked --bin readyprobe && infra/image/local-image.sh
#   BIN=target/debug/readyprobe TAG=readyprobe:dev infra/image/local-image.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/readyprobe}
TAG=${TAG:-localhost/readyprobe:local}
# vfs: works on any file system and kernel, no overlay mounts; docker format: OCI has no HEALTHCHECK.
export BUILDAH_FORMAT=docker
buildah() { command buildah --storage-driver vfs "$@"; }
# runc where installed: crun refuses a host with hybrid (v1 + v2) cgroups.
RUNTIME=()
if command -v runc >/dev/null; then RUNTIME=(--runtime runc); fi
podman() { command podman --storage-driver vfs "${RUNTIME[@]}" "$@"; }
say() { printf 'local-image: %s\n' "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (buildah and podman, rootful)"
for t in buildah podman; do command -v "$t" >/dev/null || fail "$t is not installed (apt-get install -y $t)"; done
[ -x "$BIN" ] || fail "$BIN is not an executable (cargo build --release --locked --bin readyprobe)"

ROOT=$(mktemp -d /tmp/readyprobe-image.XXXXXX)
CTR=
cleanup() {
  [ -z "$CTR" ] || buildah rm "$CTR" >/dev/null 2>&1 || true
  rm -rf "$ROOT"
}
trap cleanup EXIT
source infra/image/layout.sh
layout_final_stage "$ROOT" "$BIN" ""

CTR=$(buildah from scratch)
MNT=$(buildah mount "$CTR")
cp -a "$ROOT/." "$MNT/"
buildah umount "$CTR" >/dev/null
buildah config \
  --user 65532:65532 \
  --env READYPROBE_HEARTBEAT=/var/lib/readyprobe/heartbeat \
  --volume /var/lib/readyprobe \
  --entrypoint '["/usr/local/bin/readyprobe"]' \
  --cmd '["run", "--config", "/etc/readyprobe/readyprobe.toml"]' \
  --healthcheck 'CMD /usr/local/bin/readyprobe health' \
  --healthcheck-interval 30s --healthcheck-timeout 5s --healthcheck-start-period 30s \
  "$CTR"
buildah commit --rm "$CTR" "$TAG" >/dev/null
CTR=
image_bytes=$(podman image inspect --format '{{.Size}}' "$TAG")
bin_bytes=$(stat -c %s "$ROOT/usr/local/bin/readyprobe")
say "built $TAG: $image_bytes bytes (podman image inspect .Size), stripped binary $bin_bytes bytes"

# Limits this host lets root set: podman's defaults (open files 1048576) may exceed them.
nproc=$(ulimit -Hu); [ "$nproc" != unlimited ] && [ "$nproc" -lt 32768 ] || nproc=32768
LIMITS=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=$nproc:$nproc")
run() { podman run --rm --network none "${LIMITS[@]}" "$@"; }
say "podman run $TAG --version"
run "$TAG" --version || fail "--version exited $?"
rc=0
err=$(run "$TAG" 2>&1) || rc=$?
[ "$rc" = 64 ] || { printf '%s\n' "$err" >&2; fail "the default command without a config exited $rc, not 64"; }
say "ok: the default command without a config exits 64"

# `run` for 8 s on a config that probes a local listener (the tcp kind), `health` in the same
# container while it runs and after it stops.
CONF=$(mktemp -d /tmp/readyprobe-image-config.XXXXXX)
trap 'cleanup; rm -rf "$CONF"' EXIT
chmod 0755 "$CONF"
cat >"$CONF/readyprobe.toml" <<'TOML'
prober_id = "local-image"
state_dir = "/var/lib/readyprobe"

[service]
name = "local-image"
stable_name = "stable.localhost"

# No network in the container and so no /etc/resolv.conf; `.localhost` names resolve in-process.
[dns]
nameservers = ["127.0.0.1"]

[publish]
interval = "1s"
sinks = ["emf"]

[probe]
kind = "tcp"
interval = "500ms"
timeout = "400ms"

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "primary.localhost"
port = 9

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "secondary.localhost"
port = 9
TOML
NAME=readyprobe-local-image-$$
podman run -d --name "$NAME" --network none "${LIMITS[@]}" --read-only -v "$CONF:/etc/readyprobe:ro" \
  "$TAG" run --config /etc/readyprobe/readyprobe.toml --duration 8s >/dev/null
trap 'podman rm -f "$NAME" >/dev/null 2>&1; cleanup; rm -rf "$CONF"' EXIT
healthy=
for _ in $(seq 40); do
  # The image's own HEALTHCHECK, run once now (no systemd timer needed).
  if podman healthcheck run "$NAME" >/dev/null 2>&1; then
    healthy=$(podman exec "$NAME" /usr/local/bin/readyprobe health 2>&1) && break
  fi
  healthy=
  sleep 0.2
done
[ -n "$healthy" ] || { podman logs "$NAME" >&2; fail "health never exited 0 while run ran"; }
say "ok: the image's health check passes while run runs (podman healthcheck run); health says: $healthy"
code=$(podman wait "$NAME")
[ "$code" = 0 ] || { podman logs "$NAME" >&2; fail "run exited $code"; }
say "ok: run --duration 8s exited 0 as $(podman inspect --format '{{.Config.User}}' "$NAME")"
podman rm "$NAME" >/dev/null
say "image $TAG: $image_bytes bytes; binary (stripped) $bin_bytes bytes"
