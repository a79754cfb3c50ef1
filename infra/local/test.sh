#!/usr/bin/env bash
# The test command: installs and starts what the tests need, then runs every test.
#   - MariaDB server binaries (Debian package) for the throwaway instances the tests start;
#   - nftables (Debian package) for the fault-matrix tests' network namespaces;
#   - Chromium (Debian package) for the drill report's headless screenshot test;
#   - the CloudWatch emulator (LocalStack, in a Python 3.13 venv under /var/cache/readyprobe),
#     started on 127.0.0.1:4566 and left running for the next run;
#   - then `cargo test` (unit, property and integration tests) and the container image's final
#     stage run as a plain root file system (infra/image/rootfs-test.sh).
# With CI=true a missing component fails the tests instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/../.."

say() { printf 'test.sh: %s\n' "$*" >&2; }

say "1/4 MariaDB server binaries, nftables and Chromium (installed with apt-get if absent; the tests start their own instances and network namespaces)"
infra/local/mariadb.sh install
if ! command -v nft >/dev/null 2>&1 && [ ! -x /usr/sbin/nft ]; then
  say "nft not found; installing nftables (Debian package) for the fault-matrix tests"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null
fi
if ! command -v chromium >/dev/null 2>&1; then
  say "chromium not found; installing chromium (Debian package) for the report screenshot test"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
say "2/4 the CloudWatch and S3 emulator on 127.0.0.1:${LOCALSTACK_PORT:-4566} (the first install takes a few minutes)"
.ci/localstack.sh start
# The emulator takes any credentials; the tests must never reach a cloud metadata endpoint.
export AWS_EC2_METADATA_DISABLED=true
export READYPROBE_TEST_CLOUDWATCH_ENDPOINT="${READYPROBE_TEST_CLOUDWATCH_ENDPOINT:-http://127.0.0.1:${LOCALSTACK_PORT:-4566}}"

if [ -d target/debug/deps ]; then
  say "3/4 cargo test (unit, property and integration tests; a few minutes)"
else
  say "3/4 cargo test; the first build compiles every dependency and takes several minutes (about 3 min on 2 cores), then the tests run for a few minutes"
fi
cargo test --locked --all-targets "$@"

say "4/4 the image's final stage as a plain root file system (infra/image/rootfs-test.sh, with the debug binary the tests built)"
BIN=target/debug/readyprobe infra/image/rootfs-test.sh
