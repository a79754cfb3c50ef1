# syntax=docker/dockerfile:1
# readyprobe image: a release build on Debian 12, then distroless `cc` (Debian 12: glibc, libgcc,
# CA certificates, a `nonroot` user, no shell, no package manager). The binary links glibc
# (libc, libm, libgcc_s), so a `static` base would not run it. infra/image/rootfs-test.sh lays
# out this final stage's file system and runs it under chroot as the non-root user (docs/deploy.md).
#
#   docker build -t readyprobe .                                            # no config baked in
#   docker build -t readyprobe:mine --build-arg CONFIG=probes/mine.toml .   # your config baked in
#
# The config is read from /etc/readyprobe/readyprobe.toml. The default build bakes none, so the
# image cannot start with a config that names files it lacks (a CA bundle, say): mount a
# directory holding the config and its files over /etc/readyprobe (docker run -v, or an EFS
# volume in the ECS templates), or bake one in with CONFIG (a file of the build context:
# .dockerignore lets in probes/*.toml) whose every file is mounted or in the image. Without a
# config, `run` exits 64 naming /etc/readyprobe/readyprobe.toml. rootfs-test.sh checks both.

ARG RUST_VERSION=1.95

# Fully qualified: podman and buildah resolve no short names without a registries.conf.
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first, so a change under src/ does not rebuild them: a stub crate with the same
# manifest and lock file. The manifest names the integration tests, so their stub is needed too.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src tests/it \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs tests/it/main.rs \
 && cargo build --release --locked --bin readyprobe \
 && rm -rf src
COPY src ./src
# touch: the stub's build is older than the sources, but cargo compares modification times.
# The release profile (Cargo.toml) links with LTO and strips the binary; a panic still prints
# its message and location.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin readyprobe \
 && install -d -m 0750 /out/state \
 && install -d -m 0755 /out/config
# The config to bake in: none by default; a baked one must pass `check` (syntax and rules).
ARG CONFIG=
COPY probes ./probes
RUN if [ -n "$CONFIG" ]; then \
      install -m 0644 "$CONFIG" /out/config/readyprobe.toml \
      && target/release/readyprobe check --config /out/config/readyprobe.toml; \
    fi

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/readyprobe /usr/local/bin/readyprobe
COPY --from=build --chown=65532:65532 /out/state/ /var/lib/readyprobe/
COPY --from=build /out/config/ /etc/readyprobe/
# Evidence and scratch state. Declared a volume so that ECS (Fargate bind mounts) copies this
# directory and its owner into the task's volume and a read-only root file system still works.
VOLUME ["/var/lib/readyprobe"]
USER 65532:65532
# `run` rewrites the heartbeat file every 5 s while its loop turns; `health` exits 1 once it is
# older than 30 s. Exec form: the image has no shell. ECS ignores an image's HEALTHCHECK, so the
# task definitions set the same command; this one serves `docker run`.
ENV READYPROBE_HEARTBEAT=/var/lib/readyprobe/heartbeat
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/readyprobe", "health"]
ENTRYPOINT ["/usr/local/bin/readyprobe"]
CMD ["run", "--config", "/etc/readyprobe/readyprobe.toml"]
