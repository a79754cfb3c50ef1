#!/usr/bin/env bash
# Lint of the deployment files, run by .ci/run before the tests:
#   - cfn-lint on the CloudFormation template (against the resource specifications);
#   - checkov, offline, on the CloudFormation templates, the Terraform modules and the Dockerfile
#     (each skip is justified next to its resource);
#   - hadolint on the Dockerfile;
#   - python-hcl2 parses every .tf file of the modules (terraform itself, fmt to plan: infra/terraform-check.sh).
# The tools live in a venv under /var/cache/readyprobe, pinned by infra/lint-requirements.txt and
# reinstalled only when that file changes. LINT_VENV and LINT_PYTHON (a Python >= 3.11) change it.
set -euo pipefail
cd "$(dirname "$0")/.."

REQS=infra/lint-requirements.txt
VENV=${LINT_VENV:-/var/cache/readyprobe/lint-venv}
STAMP=$VENV/.requirements.sha256

say() { printf 'lint.sh: %s\n' "$*" >&2; }

py_ok() { "$1" -c 'import sys, venv; sys.exit(sys.version_info[:2] < (3, 11))' >/dev/null 2>&1; }

find_python() {
  local c
  if [ -n "${LINT_PYTHON:-}" ]; then
    py_ok "$LINT_PYTHON" && { echo "$LINT_PYTHON"; return; }
    say "LINT_PYTHON=$LINT_PYTHON is not a Python >= 3.11"; exit 1
  fi
  # pyenv's 3.12 first (the version the pins were frozen on), then any 3.11+.
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3 \
           "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[1-9]*/bin/python3 python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null 2>&1 && py_ok "$c"; then command -v "$c"; return; fi
  done
  say "no Python >= 3.11 found (pyenv or PATH); set LINT_PYTHON"; exit 1
}

install() {
  local want py t0
  want=$(sha256sum "$REQS" | cut -d' ' -f1)
  if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
    return
  fi
  py=$(find_python)
  t0=$(date +%s)
  say "installing the linters into $VENV with $("$py" -V 2>&1) (a minute or two, once)"
  if [ -e "$VENV" ]; then
    [ -f "$VENV/pyvenv.cfg" ] || { say "$VENV exists and is not a venv; refusing to touch it"; exit 1; }
    rm -rf "$VENV"
  fi
  mkdir -p "$(dirname "$VENV")"
  "$py" -m venv "$VENV"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --no-input --quiet --no-deps -r "$REQS"
  "$VENV/bin/python" -m pip check >&2
  # Compiled once here: with PYTHONDONTWRITEBYTECODE set, every run would compile checkov again.
  "$VENV/bin/python" -m compileall -q -j 0 "$VENV/lib" >/dev/null || true
  echo "$want" >"$STAMP"
  say "installed in $(( $(date +%s) - t0 ))s"
}

install
t0=$(date +%s)

say "cfn-lint infra/cloudformation/"
"$VENV/bin/cfn-lint" infra/cloudformation/*.yaml

say "checkov (offline) on infra/cloudformation/, infra/terraform/ (and its modules/) and the Dockerfile"
files=(-f Dockerfile)
for f in infra/cloudformation/*.yaml infra/terraform/*.tf infra/terraform/modules/*/*.tf; do files+=(-f "$f"); done
BC_SKIP_MAPPING=TRUE "$VENV/bin/checkov" --skip-download --quiet --compact \
  --framework cloudformation terraform dockerfile "${files[@]}"

say "hadolint Dockerfile"
"$VENV/bin/hadolint" Dockerfile

say "python-hcl2 parses infra/terraform/*.tf and infra/terraform/modules/*/*.tf"
"$VENV/bin/python" - infra/terraform/*.tf infra/terraform/modules/*/*.tf <<'PY'
import sys
import hcl2
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        hcl2.load(f)
print(f"{len(sys.argv) - 1} files parsed", file=sys.stderr)
PY

say "done in $(( $(date +%s) - t0 ))s"
