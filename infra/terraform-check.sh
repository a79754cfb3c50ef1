#!/usr/bin/env bash
# The Terraform module evaluated by terraform itself, offline, run by .ci/run after lint.sh:
#   terraform fmt -check, init against a local provider directory, validate, and the plan-only
#   tests (infra/terraform/tests/) of the example root module in both modes.
# The hashicorp/aws provider comes from a plugin directory (`terraform init -plugin-dir`):
# TF_PLUGIN_DIR, else the first directory under /opt, /usr/local/share, /usr/share or
# ~/.terraform.d that holds registry.terraform.io/hashicorp/aws/<version>/<os>_<arch>/.
# With CI=true a missing terraform or provider fails; otherwise it is skipped with a message.
# Nothing is left in the tree: the working data goes to a temporary TF_DATA_DIR and the lock
# file init writes is removed.
set -euo pipefail
cd "$(dirname "$0")/terraform"

say() { printf 'terraform-check.sh: %s\n' "$*" >&2; }
missing() {
  if [ "${CI:-}" = true ]; then say "$1 (CI=true: a failure, not a skip)"; exit 1; fi
  say "$1; skipped"; exit 0
}

command -v terraform >/dev/null 2>&1 || missing "no terraform on PATH"
plugins=${TF_PLUGIN_DIR:-}
if [ -z "$plugins" ]; then
  for root in /opt /usr/local/share /usr/share "$HOME/.terraform.d"; do
    hit=$(find "$root" -maxdepth 8 -path '*/registry.terraform.io/hashicorp/aws/*' \
      -name 'terraform-provider-aws*' -type f 2>/dev/null | head -n 1)
    if [ -n "$hit" ]; then plugins=${hit%%/registry.terraform.io/*}; break; fi
  done
fi
[ -n "$plugins" ] && [ -d "$plugins/registry.terraform.io/hashicorp/aws" ] \
  || missing "no hashicorp/aws provider in a plugin directory (set TF_PLUGIN_DIR)"

data=$(mktemp -d)
lock_existed=false; [ -e .terraform.lock.hcl ] && lock_existed=true
cleanup() { rm -rf "$data"; "$lock_existed" || rm -f .terraform.lock.hcl; }
trap cleanup EXIT
export TF_DATA_DIR=$data TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1
# No user CLI configuration (mirrors, credentials): the plugin directory alone.
export TF_CLI_CONFIG_FILE=/dev/null
t0=$(date +%s)

say "$(terraform version | head -n 1), provider from $plugins"
terraform fmt -check -recursive -diff .
terraform init -backend=false -plugin-dir="$plugins" -no-color >/dev/null
terraform validate -no-color
terraform test -no-color
say "done in $(( $(date +%s) - t0 ))s"
