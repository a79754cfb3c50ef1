#!/usr/bin/env bash
# The test command: installs and starts what the tests need, then runs every test.
#   - MariaDB server binaries (Debian package) for the throwaway instances the tests start;
#   - PostgreSQL 15 server binaries (Debian package) for the postgres kind's throwaway clusters;
#   - nftables (Debian package) for the fault-matrix tests' network namespaces;
#   - Chromium (Debian package) for the drill report's headless screenshot test;
#   - Prometheus (Debian package `prometheus`: promtool, prometheus) for the /metrics tests;
#   - the CloudWatch emulator (LocalStack, in a Python 3.13 venv under /var/cache/readyprobe),
#     started on 127.0.0.1:4566 and left running for the next run;
#   - then every test (unit, property and integration) with cargo-nextest, several at once
#     (.config/nextest.toml), and the container image's final stage run as a plain root file
#     system (infra/image/rootfs-test.sh).
# With CI=true a missing component fails the tests instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/../.."

say() { printf 'test.sh: %s\n' "$*" >&2; }
# The test runner (.config/nextest.toml); checked first, before anything is installed or started.
if ! cargo nextest --version >/dev/null 2>&1; then
  say "cargo-nextest not found; installing it (cargo install --locked cargo-nextest, a few minutes once)"
  cargo install --locked cargo-nextest
fi

say "1/4 MariaDB and PostgreSQL server binaries, nftables, Prometheus and Chromium (installed with apt-get if absent; the tests start their own instances and network namespaces)"
infra/local/mariadb.sh install
if ! command -v nft >/dev/null 2>&1 && [ ! -x /usr/sbin/nft ]; then
  say "nft not found; installing nftables (Debian package) for the fault-matrix tests"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null
fi
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  say "PostgreSQL server binaries not found; installing postgresql-15 (Debian package) for the postgres kind's throwaway clusters"
  # No default cluster: the tests run initdb as the postgres user into directories of their own.
  mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
fi
if ! command -v promtool >/dev/null 2>&1; then
  say "promtool not found; installing prometheus (Debian package: promtool and prometheus) for the /metrics exposition tests"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi
if ! command -v chromium >/dev/null 2>&1; then
  say "chromium not found; installing chromium (Debian package) for the report screenshot test"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
say "2/4 the AWS emulator (CloudWatch, S3, Route 53, STS, Secrets Manager, CloudFormation, IAM, KMS) on 127.0.0.1:${LOCALSTACK_PORT:-4566} (the first install takes a few minutes)"
.ci/localstack.sh start
# The emulator takes any credentials; the tests must never reach a cloud metadata endpoint.
export AWS_EC2_METADATA_DISABLED=true
export READYPROBE_TEST_CLOUDWATCH_ENDPOINT="${READYPROBE_TEST_CLOUDWATCH_ENDPOINT:-http://127.0.0.1:${LOCALSTACK_PORT:-4566}}"

TARGET=${CARGO_TARGET_DIR:-target}
# Every test that skips for a missing component appends `<test>\t<reason>` here
# (tests/it/support/mod.rs); counted at the end, so a green run says how much it did not test.
export READYPROBE_SKIP_LOG="$PWD/$TARGET/test-skips.log"
case $TARGET in /*) READYPROBE_SKIP_LOG="$TARGET/test-skips.log" ;; esac
mkdir -p "$TARGET"
: > "$READYPROBE_SKIP_LOG"
report_skips() {
  local n
  n=$(cut -f1 "$READYPROBE_SKIP_LOG" | sort -u | wc -l)
  if [ "$n" = 0 ]; then
    say "0 tests skipped"
  else
    say "$n tests skipped ($(cut -f2- "$READYPROBE_SKIP_LOG" | sort | uniq -c | sort -rn \
      | awk '{c=$1; $1=""; sub(/^ /, ""); printf "%s%d: %s", sep, c, $0; sep="; "}')); list: $READYPROBE_SKIP_LOG"
  fi
}

if [ -d "$TARGET/debug/deps" ]; then
  say "3/4 cargo nextest run (unit, property and integration tests; a few minutes)"
else
  say "3/4 cargo nextest run; the first build compiles every dependency and takes several minutes (about 3 min on 2 cores), then the tests run for a few minutes"
fi
status=0
cargo nextest run --locked --all-targets "$@" || status=$?
if [ "$status" != 0 ]; then
  report_skips
  exit "$status"
fi

say "4/4 the image's final stage as a plain root file system (infra/image/rootfs-test.sh, with the debug binary the tests built)"
BIN="$TARGET/debug/readyprobe" infra/image/rootfs-test.sh
report_skips
