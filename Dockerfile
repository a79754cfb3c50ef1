# syntax=docker/dockerfile:1
# readyprobe image: a release build on Debian 12, then distroless `cc` (Debian 12: glibc, libgcc,
# CA certificates, a `nonroot` user, no shell, no package manager). The binary links glibc
# (libc, libm, libgcc_s), so a `static` base would not run it. infra/image/rootfs-test.sh runs
# exactly this final file system under chroot as the non-root user (docs/deploy.md).
#
#   docker build -t readyprobe .
#   docker build -t readyprobe:orders-db --build-arg CONFIG=probes/orders-db.toml .   # config baked in
#
# The config is read from /etc/readyprobe/readyprobe.toml: bake it in with CONFIG, or mount a
# directory over /etc/readyprobe (docker run -v, or an EFS volume in the ECS templates).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
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
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin readyprobe \
 && install -d -o 65532 -g 65532 -m 0750 /out/var/lib/readyprobe \
 && install -D -m 0755 target/release/readyprobe /out/usr/local/bin/readyprobe
# The config to bake in (the production example by default; name your own).
ARG CONFIG=probes/orders-db.toml
COPY ${CONFIG} /out/etc/readyprobe/readyprobe.toml

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /
# Evidence and scratch state. Declared a volume so that ECS (Fargate bind mounts) copies this
# directory and its owner into the task's volume and a read-only root file system still works.
VOLUME ["/var/lib/readyprobe"]
USER 65532:65532
# No HEALTHCHECK: without a shell there is nothing to run but readyprobe itself, and whether the
# prober works is what its Heartbeat alarm says (and ECS does not use an image's HEALTHCHECK).
#checkov:skip=CKV_DOCKER_2:the Heartbeat alarm is the prober's health check; see the comment above
ENTRYPOINT ["/usr/local/bin/readyprobe"]
CMD ["run", "--config", "/etc/readyprobe/readyprobe.toml"]
