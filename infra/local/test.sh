#!/usr/bin/env bash
# The test command: installs and starts what the tests need, then runs every test.
#   - MariaDB server binaries (Debian package) for the throwaway instances the tests start;
#   - the CloudWatch emulator (LocalStack, in a Python 3.13 venv under /var/cache/readyprobe),
#     started on 127.0.0.1:4566 and left running for the next run;
#   - then `cargo test` (unit, property and integration tests).
# With CI=true a missing component fails the tests instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/../.."

infra/local/mariadb.sh install
.ci/localstack.sh start
# The emulator takes any credentials; the tests must never reach a cloud metadata endpoint.
export AWS_EC2_METADATA_DISABLED=true
export READYPROBE_TEST_CLOUDWATCH_ENDPOINT="${READYPROBE_TEST_CLOUDWATCH_ENDPOINT:-http://127.0.0.1:${LOCALSTACK_PORT:-4566}}"

cargo test --locked --all-targets "$@"
