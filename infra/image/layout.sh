# Sourced by rootfs-test.sh and local-image.sh: lays out the Dockerfile's final stage as a
# directory, from an already built binary, without a container engine or registry.
#
#   layout_final_stage ROOT BIN CONFIG
#
# ROOT gets: BIN stripped (as the release profile does) at /usr/local/bin/readyprobe; the shared
# libraries `ldd` names for it, copied from this machine (Debian 12: the glibc and libgcc that
# distroless cc-debian12 carries); the CA bundle; distroless's passwd and group (root, nobody,
# nonroot); /tmp; /home/nonroot and /var/lib/readyprobe owned by 65532; /etc/readyprobe with
# CONFIG as readyprobe.toml when CONFIG is not empty. What distroless carries beyond that
# (tzdata, libssl, libstdc++, its os-release and licence files) is not there. No shell.

layout_final_stage() {
  local root=$1 bin=$2 config=$3 lib
  chmod 0755 "$root"   # the image's / (mktemp makes it 0700)
  install -D -m 0755 "$bin" "$root/usr/local/bin/readyprobe"
  strip "$root/usr/local/bin/readyprobe"   # as the release profile does
  ldd "$bin" | awk '/=> \// { print $3 } /^\s*\/lib/ { print $1 }' | while read -r lib; do
    install -D -m 0755 "$lib" "$root$lib"
  done
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  mkdir -p "$root/etc" "$root/home/nonroot" "$root/tmp"
  chmod 1777 "$root/tmp"
  chown 65532:65532 "$root/home/nonroot"
  cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
  cat >"$root/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
GROUP
  # The build stage's `install -d -m 0750 /out/state`, copied with `--chown=65532:65532`.
  install -d -o 65532 -g 65532 -m 0750 "$root/var/lib/readyprobe"
  # The build stage's /out/config: empty, or the CONFIG file as readyprobe.toml.
  install -d -m 0755 "$root/etc/readyprobe"
  if [ -n "$config" ]; then
    install -m 0644 "$config" "$root/etc/readyprobe/readyprobe.toml"
  fi
}
