#!/usr/bin/env bash
# Builds the image from the Dockerfile for linux/amd64 and linux/arm64 (Graviton Fargate) and
# pushes both under one tag to ECR, as a multi-architecture manifest list: ECS pulls the part that
# matches the task's `runtimePlatform.cpuArchitecture` (the templates' `architecture`).
#
#   REGISTRY=123456789012.dkr.ecr.eu-west-1.amazonaws.com infra/image/build.sh
#   REGISTRY=... REPOSITORY=readyprobe TAG=v1.2.0 ENGINE=podman infra/image/build.sh
#   PLATFORMS=linux/amd64 PUSH=0 infra/image/build.sh         # one architecture, nothing pushed
#
# REGISTRY    the ECR registry (ACCOUNT.dkr.ecr.REGION.amazonaws.com); required when pushing
# REPOSITORY  the ECR repository (default readyprobe); it must exist (aws ecr create-repository)
# TAG         default: the short commit, with "-dirty" when the work tree has changes
# PLATFORMS   default linux/amd64,linux/arm64
# ENGINE      docker (buildx, the default when installed) or podman (with --manifest)
# PUSH        1 (default) logs in to ECR (aws ecr get-login-password) and pushes; 0 only builds
# BUILD_ARGS  extra build arguments, e.g. "--build-arg CONFIG=probes/yours.toml"
#
# The other architecture builds under emulation (QEMU binfmt: the Debian package
# qemu-user-static, or `docker run --privileged tonistiigi/binfmt --install arm64`), so that
# Rust build takes several times the native one; a native arm64 host builds it at full speed.
# Needs the AWS CLI with credentials allowed ecr:GetAuthorizationToken and the push actions
# (ecr:BatchCheckLayerAvailability, ecr:InitiateLayerUpload, ecr:UploadLayerPart,
# ecr:CompleteLayerUpload, ecr:PutImage, ecr:BatchGetImage) on the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."

REPOSITORY=${REPOSITORY:-readyprobe}
PLATFORMS=${PLATFORMS:-linux/amd64,linux/arm64}
PUSH=${PUSH:-1}
BUILD_ARGS=${BUILD_ARGS:-}
if [ -z "${TAG:-}" ]; then
  TAG=$(git rev-parse --short=12 HEAD)
  git diff --quiet HEAD -- || TAG="$TAG-dirty"
fi
if [ -z "${ENGINE:-}" ]; then
  # docker only with a daemon to talk to and the buildx plugin; else podman (daemonless).
  if docker info >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1; then ENGINE=docker; else ENGINE=podman; fi
fi
say() { printf 'build.sh: %s\n' "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

if [ "$PUSH" = 1 ]; then
  [ -n "${REGISTRY:-}" ] || fail "REGISTRY is not set (ACCOUNT.dkr.ecr.REGION.amazonaws.com), or PUSH=0"
  region=$(printf '%s' "$REGISTRY" | sed -n 's/^[0-9]*\.dkr\.ecr\.\([a-z0-9-]*\)\.amazonaws\.com.*$/\1/p')
  [ -n "$region" ] || fail "REGISTRY $REGISTRY is not an ECR registry name"
  IMAGE=$REGISTRY/$REPOSITORY:$TAG
  say "logging $ENGINE in to $REGISTRY"
  aws ecr get-login-password --region "$region" \
    | "$ENGINE" login --username AWS --password-stdin "$REGISTRY"
else
  IMAGE=${REGISTRY:-localhost}/$REPOSITORY:$TAG
fi

say "building $IMAGE for $PLATFORMS with $ENGINE"
# shellcheck disable=SC2086 # BUILD_ARGS is a list of words
case $ENGINE in
  docker)
    out=--load
    [ "$PUSH" = 1 ] && out=--push
    # --load takes one platform only; a multi-platform build without --push stays in the cache.
    [ "$PUSH" = 1 ] || [[ $PLATFORMS != *,* ]] || out=
    docker buildx build --platform "$PLATFORMS" $BUILD_ARGS -t "$IMAGE" $out .
    ;;
  podman)
    podman manifest rm "$IMAGE" >/dev/null 2>&1 || true
    podman build --platform "$PLATFORMS" --manifest "$IMAGE" $BUILD_ARGS .
    if [ "$PUSH" = 1 ]; then
      podman manifest push --all "$IMAGE" "docker://$IMAGE"
    fi
    ;;
  *) fail "ENGINE=$ENGINE: docker or podman" ;;
esac
say "done: $IMAGE ($PLATFORMS)$([ "$PUSH" = 1 ] && echo ", pushed")"
