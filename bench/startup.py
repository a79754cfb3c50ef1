#!/usr/bin/env python3
"""Start-up benchmark, as a scheduled task runs: `readyprobe run --duration 2s`, RUNS times, on a
tcp config (two branches on a local listener, EMF on stdout, no saved state).

Measures from just before the exec to (a) the `readyprobe started` log line (config read, services
prepared, state loaded, sinks and loops started: the start-up), and (b) the first stdout line
holding a `Readiness` value. A run shorter than `publish.interval` publishes at its final tick, so
(b) minus the 2 s duration is what start-up and shutdown add. Prints min / median / max in ms, and
the binary's size.

    bench/startup.py [BIN] [RUNS]      # defaults: target/release/readyprobe, 20
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/readyprobe"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 20


def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(128)

    def accept():
        while True:
            c, _ = s.accept()
            c.close()

    threading.Thread(target=accept, daemon=True).start()
    return s.getsockname()[1]


CONFIG = """prober_id = "startup"
state_dir = "{state}"

[service]
name = "startup"
stable_name = "svc.startup.localhost"

[readiness]
window = "10s"
min_attempts = 3
initial = "ready"

[publish]
interval = "10s"
sinks = ["emf"]

[probe]
kind = "tcp"
interval = "1s"
timeout = "500ms"

[probe.tcp]
port = {port}

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "primary.startup.localhost"

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "secondary.startup.localhost"
"""


def one(config):
    t0 = time.monotonic()
    p = subprocess.Popen(
        [BIN, "run", "--config", config, "--duration", "2s", "--log-level", "info"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = []

    def watch():
        for line in p.stderr:
            if not started and "readyprobe started" in line:
                started.append((time.monotonic() - t0) * 1000)

    w = threading.Thread(target=watch)
    w.start()
    first = None
    for line in p.stdout:
        if first is None and '"Readiness"' in line:
            first = (time.monotonic() - t0) * 1000
    p.wait()
    w.join()
    if first is None or not started:
        sys.exit(f"startup: no start line or no Readiness datum (exit {p.returncode})")
    return started[0], first - 2000


def main():
    port = listener()
    with tempfile.TemporaryDirectory() as d:
        config = os.path.join(d, "startup.toml")
        with open(config, "w") as f:
            f.write(CONFIG.format(state=os.path.join(d, "state"), port=port))
        runs = []
        for _ in range(RUNS):
            # A fresh state directory each run: no saved state, the initial state is published.
            subprocess.run(["rm", "-rf", os.path.join(d, "state")], check=True)
            runs.append(one(config))
    size = os.path.getsize(BIN)
    print(f"binary {BIN}: {size} bytes ({size / 1024 / 1024:.1f} MiB)")
    for name, xs in (
        ("exec to `readyprobe started`", [r[0] for r in runs]),
        ("first Readiness datum after the 2 s duration", [r[1] for r in runs]),
    ):
        print(
            f"{name} over {RUNS} runs: min {min(xs):.1f} ms, "
            f"median {statistics.median(xs):.1f} ms, max {max(xs):.1f} ms"
        )


if __name__ == "__main__":
    main()
