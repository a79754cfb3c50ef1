#!/usr/bin/env bash
# LocalStack (no Docker) as a local CloudWatch / S3 / Route53 / STS emulator
# for the tests.
#
#   .ci/localstack.sh install   # venv from .ci/localstack-requirements.txt (fast no-op when current)
#   .ci/localstack.sh start     # install if needed, start in background, wait for health
#   .ci/localstack.sh stop
#   .ci/localstack.sh status    # exit 0 if healthy, 1 otherwise
#   .ci/localstack.sh logs      # tail of the log
#
# Environment:
#   LOCALSTACK_VENV      venv dir          (default /var/cache/readyprobe/localstack-venv)
#   LOCALSTACK_PORT      gateway port      (default 4566, bound to 127.0.0.1 only)
#   LOCALSTACK_SERVICES  services to run   (default cloudwatch,s3,route53,sts,secretsmanager,cloudformation,iam,kms)
#   LOCALSTACK_PYTHON    python >= 3.13 to build the venv with (default: found via pyenv/PATH)
#   LOCALSTACK_START_TIMEOUT  seconds to wait for health (default 60)
#
# Clients: endpoint http://127.0.0.1:4566, any credentials (e.g. test/test),
# region e.g. us-east-1.
#
# Python 3.13+ is required: localstack-core 2026.3.0 imports
# `warnings.deprecated` (3.13+); on 3.12 the runtime fails at start with
# "No component plugins found in namespace localstack.runtime.components".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCK_FILE="$HERE/localstack-requirements.txt"
VENV="${LOCALSTACK_VENV:-/var/cache/readyprobe/localstack-venv}"
PORT="${LOCALSTACK_PORT:-4566}"
HOST="127.0.0.1"
SERVICES="${LOCALSTACK_SERVICES:-cloudwatch,s3,route53,sts,secretsmanager,cloudformation,iam,kms}"
START_TIMEOUT="${LOCALSTACK_START_TIMEOUT:-60}"
STAMP_FILE="$VENV/.localstack-lock.sha256"
RUN_DIR="$VENV/run"
PID_FILE="$RUN_DIR/localstack-$PORT.pid"
LOG_FILE="$RUN_DIR/localstack-$PORT.log"
HEALTH_URL="http://$HOST:$PORT/_localstack/health"
MIN_PY_MINOR=13

say() { echo "[localstack] $*" >&2; }
die() { echo "[localstack] ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- python
py_ok() {
    # $1 is a runnable CPython 3 with minor >= MIN_PY_MINOR and the venv module
    "$1" -c "import sys, venv; sys.exit(0 if sys.version_info[:2] >= (3, $MIN_PY_MINOR) else 1)" \
        >/dev/null 2>&1
}

find_python() {
    local c
    local -a cands=()
    if [[ -n "${LOCALSTACK_PYTHON:-}" ]]; then
        py_ok "$LOCALSTACK_PYTHON" && { echo "$LOCALSTACK_PYTHON"; return 0; }
        die "LOCALSTACK_PYTHON=$LOCALSTACK_PYTHON is not a working Python >= 3.$MIN_PY_MINOR"
    fi
    local roots=("${PYENV_ROOT:-}" "$HOME/.pyenv" /root/.pyenv)
    local r
    for r in "${roots[@]}"; do
        [[ -n "$r" && -d "$r/versions" ]] || continue
        # newest 3.13.x first; then any newer 3.x
        while IFS= read -r c; do cands+=("$c"); done < <(
            compgen -G "$r/versions/3.1[3-9]*/bin/python3.1[3-9]" | sort -rV || true)
    done
    for c in python3.13 python3.14 python3; do
        command -v "$c" >/dev/null 2>&1 && cands+=("$(command -v "$c")")
    done
    for c in "${cands[@]}"; do
        if py_ok "$c"; then echo "$c"; return 0; fi
    done
    die "no Python >= 3.$MIN_PY_MINOR found (looked in \$PYENV_ROOT/versions/3.13*, ~/.pyenv, /root/.pyenv, PATH). Install one (e.g. 'pyenv install 3.13') or set LOCALSTACK_PYTHON."
}

lock_hash() {
    sha256sum "$LOCK_FILE" | cut -d' ' -f1
}

installed_ok() {
    [[ -x "$VENV/bin/python" && -f "$STAMP_FILE" ]] || return 1
    [[ "$(cat "$STAMP_FILE")" == "$(lock_hash)" ]] || return 1
    py_ok "$VENV/bin/python"
}

# ---------------------------------------------------------------- process
running_pid() {
    # prints the pid from the pid file if that process is alive and is LocalStack
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "localstack.runtime.main" || return 1
    echo "$pid"
}

# healthy = gateway answers and every requested service is available/running
healthy() {
    local py="python3"
    [[ -x "$VENV/bin/python" ]] && py="$VENV/bin/python"
    command -v "$py" >/dev/null 2>&1 || py="$VENV/bin/python"
    "$py" - "$HEALTH_URL" "$SERVICES" <<'PY' >/dev/null 2>&1
import json, sys, urllib.request
url, services = sys.argv[1], [s.strip() for s in sys.argv[2].split(",") if s.strip()]
with urllib.request.urlopen(url, timeout=2) as r:
    h = json.load(r)
st = h.get("services", {})
bad = [s for s in services if st.get(s) not in ("available", "running")]
sys.exit(1 if bad else 0)
PY
}

log_tail() {
    if [[ -f "$LOG_FILE" ]]; then
        echo "----- last 40 lines of $LOG_FILE -----" >&2
        tail -n 40 "$LOG_FILE" >&2 || true
        echo "-----" >&2
    fi
}

# ---------------------------------------------------------------- commands
cmd_install() {
    [[ -f "$LOCK_FILE" ]] || die "lock file missing: $LOCK_FILE"
    if installed_ok; then
        say "venv up to date: $VENV"
        return 0
    fi
    if running_pid >/dev/null; then
        die "LocalStack is running from $VENV (pid $(running_pid)); run '$0 stop' before reinstalling"
    fi
    local py t0
    py="$(find_python)"
    t0=$(date +%s)
    say "installing into $VENV with $py ($("$py" -V 2>&1))"
    if [[ -e "$VENV" ]]; then
        # only ever delete something that is a venv
        [[ -f "$VENV/pyvenv.cfg" ]] || die "$VENV exists and is not a venv; refusing to touch it"
        say "removing stale venv"
        rm -rf "$VENV"
    fi
    mkdir -p "$(dirname "$VENV")"
    "$py" -m venv "$VENV"
    say "pip install -r $(basename "$LOCK_FILE") (takes a few minutes on a cold pip cache)"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --no-input --quiet \
        --no-deps -r "$LOCK_FILE"
    "$VENV/bin/python" -m pip check >/dev/null || {
        "$VENV/bin/python" -m pip check >&2 || true
        die "pip check failed"
    }
    "$VENV/bin/python" -c "import localstack.runtime.main, localstack.aws.components" \
        || die "localstack does not import in $VENV"
    lock_hash >"$STAMP_FILE"
    say "installed in $(( $(date +%s) - t0 ))s"
}

cmd_start() {
    if healthy; then
        say "already healthy at http://$HOST:$PORT"
        return 0
    fi
    cmd_install
    mkdir -p "$RUN_DIR"
    local pid
    if pid="$(running_pid)"; then
        say "already starting (pid $pid); waiting for health"
    else
        if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
            die "port $HOST:$PORT is in use by something that is not a healthy LocalStack"
        fi
        [[ -f "$LOG_FILE" ]] && mv -f "$LOG_FILE" "$LOG_FILE.1"
        say "starting on $HOST:$PORT (services: $SERVICES), log: $LOG_FILE"
        # GATEWAY_SERVER=hypercorn: the default "twisted" server ignores the host
        # part of GATEWAY_LISTEN and binds 0.0.0.0; hypercorn binds 127.0.0.1.
        # No outbound network: DNS server off, no TLS cert download, no analytics.
        # Its scratch files (the CloudWatch sqlite store among them) live under TMPDIR; keep
        # them out of /tmp so nothing that cleans /tmp pulls them away mid-run.
        local scratch="$RUN_DIR/tmp-$PORT"
        rm -rf "$scratch" && mkdir -p "$scratch"
        env GATEWAY_LISTEN="$HOST:$PORT" \
            TMPDIR="$scratch" \
            GATEWAY_SERVER=hypercorn \
            SERVICES="$SERVICES" \
            PERSISTENCE=0 \
            DISABLE_EVENTS=1 \
            DNS_ADDRESS=0 \
            SKIP_SSL_CERT_DOWNLOAD=1 \
            PYTHONUNBUFFERED=1 \
            setsid "$VENV/bin/python" -m localstack.runtime.main \
            </dev/null >"$LOG_FILE" 2>&1 &
        pid=$!
        echo "$pid" >"$PID_FILE"
    fi
    local waited=0
    while ! healthy; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log_tail
            rm -f "$PID_FILE"
            die "LocalStack (pid $pid) exited during startup"
        fi
        if (( waited >= START_TIMEOUT )); then
            log_tail
            die "not healthy after ${START_TIMEOUT}s (pid $pid still running; '$0 stop' to kill it)"
        fi
        sleep 1
        waited=$(( waited + 1 ))
    done
    say "healthy after ~${waited}s (pid $pid): http://$HOST:$PORT"
}

cmd_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        rm -f "$PID_FILE"
        if healthy; then
            say "something healthy answers on $HOST:$PORT but it has no pid file here; not touching it"
        else
            say "not running"
        fi
        return 0
    fi
    say "stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 20); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "still alive after 10s; SIGKILL to its process group"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE"
    say "stopped"
}

cmd_status() {
    local pid=""
    pid="$(running_pid || true)"
    if healthy; then
        say "healthy at http://$HOST:$PORT${pid:+ (pid $pid)}; venv $VENV"
        return 0
    fi
    if [[ -n "$pid" ]]; then
        say "process $pid running but not healthy (yet?); log: $LOG_FILE"
    else
        say "not running"
    fi
    if installed_ok; then say "venv up to date: $VENV"; else say "venv missing or stale: $VENV"; fi
    return 1
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_stop; cmd_start ;;
    status) cmd_status ;;
    logs) tail -n "${2:-100}" "$LOG_FILE" ;;
    *)
        echo "usage: $0 {install|start|stop|restart|status|logs [N]}" >&2
        exit 2
        ;;
esac
