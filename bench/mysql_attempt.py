#!/usr/bin/env python3
"""A `mysql` attempt beside a client: against one throwaway MariaDB with TLS on loopback, the
same work (connect with TLS and a verified certificate, authenticate, the canary upsert, the
SELECT read-back, disconnect) timed ITER times each by:

  (a) readyprobe: `run` at a 100 ms interval; each attempt's step durations from the evidence
      (sum of resolve .. verify; the first attempt of each process is reported apart);
  (b) PyMySQL (pip-installed into a venv under /tmp), perf_counter around connect(ssl, verify) ..
      close at the same 100 ms pace, autocommit on (the server's default: no extra round trip);
  (c) the `mariadb` CLI, `-e "INSERT ...; SELECT ..."`, process wall time;
  (d) the round-trip floor: the median of a `COM_PING` round trip on an open PyMySQL session
      (client → server → client through the server's network thread), times the six exchanges of
      an attempt (TCP handshake, greeting, TLS 1.3 handshake, handshake response, upsert, select).

(a) and (b) alternate in BLOCKS blocks so both see the same load of a shared machine; with BEFORE
(another build, e.g. the previous commit) it runs as a third arm. Also the first attempt's `tls`
step of FIRST fresh `readyprobe probe` processes, for BIN and BEFORE.

    bench/mysql_attempt.py [BIN] [ITER] [BEFORE]    # defaults: target/release/readyprobe, 200
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from attempt_lib import certs, line, readyprobe_run, sh

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/readyprobe")
ITER = int(sys.argv[2]) if len(sys.argv) > 2 else 200
BEFORE = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
FIRST = int(os.environ.get("FIRST", "30"))
BLOCKS = int(os.environ.get("BLOCKS", "10"))
PORT = int(os.environ.get("DB_PORT", "33091"))
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PASSWORD = os.urandom(12).hex()
ENDPOINT = "mysql-primary.localhost"




CONFIG = """prober_id = "bench"
state_dir = "{d}/state"

[service]
name = "bench"
stable_name = "svc.bench.localhost"

[readiness]
window = "60s"
min_attempts = 5
initial = "ready"

[publish]
interval = "60s"
sinks = ["emf"]

[probe]
kind = "mysql"
interval = "100ms"
timeout = "90ms"

[probe.tls]
ssl_mode = "verify_identity"
ssl_ca = "{d}/ca.pem"

[probe.mysql]
user = "readyprobe"
password = {{ env = "READYPROBE_MYSQL_PASSWORD" }}

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "{endpoint}"
port = {port}

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "mysql-secondary.localhost"
port = {closed}
"""




def first_tls(binary, d, env):
    out = []
    for _ in range(FIRST):
        p = subprocess.run([binary, "probe", "--config", f"{d}/bench.toml", "--branch", "primary"],
                           env=env, capture_output=True, text=True)
        for l in p.stdout.splitlines():
            w = l.split()
            if w and w[0] == "tls":
                out.append(float(w[1]))
    return out


def pymysql_loop(py, d, sql, n):
    """n PyMySQL attempts 100 ms apart (readyprobe's pace), after one unmeasured, then n pings."""
    code = f"""
import pymysql, ssl, statistics, time, json, sys
ctx = ssl.create_default_context(cafile="{d}/ca.pem")
times, pings = [], []
for i in range({n} + 1):
    time.sleep(0.1 - time.time() % 0.1)
    t = time.perf_counter()
    c = pymysql.connect(host="127.0.0.1", port={PORT}, user="readyprobe", password="{PASSWORD}",
                        database="readyprobe", ssl=ctx, autocommit=True)
    cur = c.cursor()
    cur.execute({sql[0]!r}, ("bench", "pymysql", "%032x" % i, i, time.strftime("%Y-%m-%d %H:%M:%S")))
    cur.execute({sql[1]!r}, ("bench", "pymysql"))
    assert cur.fetchone()[0] == "%032x" % i
    c.close()
    times.append((time.perf_counter() - t) * 1000)
times = times[1:]
c = pymysql.connect(host="127.0.0.1", port={PORT}, user="readyprobe", password="{PASSWORD}",
                    database="readyprobe", ssl=ctx, autocommit=True)
for i in range({n}):
    t = time.perf_counter()
    c.ping(reconnect=False)
    pings.append((time.perf_counter() - t) * 1000)
c.close()
print(json.dumps([times, pings]))
"""
    out = subprocess.run([py, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def cli_loop(d):
    env = dict(os.environ, MYSQL_PWD=PASSWORD)
    times = []
    for i in range(ITER):
        sql = (f"INSERT INTO readyprobe.canary (prober_id, branch, marker, seq, observed_at) "
               f"VALUES ('bench', 'cli', '{i:032x}', {i}, NOW()) ON DUPLICATE KEY UPDATE "
               f"marker = VALUES(marker), seq = VALUES(seq), observed_at = VALUES(observed_at); "
               f"SELECT marker, seq, @@hostname, @@server_id, @@read_only, @@innodb_read_only "
               f"FROM readyprobe.canary WHERE prober_id = 'bench' AND branch = 'cli'")
        t = time.perf_counter()
        p = subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{PORT}", "-ureadyprobe",
                            f"--ssl-ca={d}/ca.pem", "--ssl-verify-server-cert", "-N", "-e", sql],
                           env=env, capture_output=True, text=True)
        times.append((time.perf_counter() - t) * 1000)
        if p.returncode != 0 or f"{i:032x}" not in p.stdout:
            sys.exit(f"mysql_attempt: mariadb CLI failed: {p.stderr}")
    return times


def main():
    d = tempfile.mkdtemp(prefix="readyprobe-mysql-attempt-")
    db = f"{d}/db"
    try:
        certs(d, ENDPOINT)
        sh(f"{HERE}/infra/local/mariadb.sh", "install")
        sh(f"{HERE}/infra/local/mariadb.sh", "start", "primary", str(PORT), db, f"{d}/db.pem",
           f"{d}/db.key", f"{d}/ca.pem", PASSWORD)
        with open(f"{d}/bench.toml", "w") as f:
            f.write(CONFIG.format(d=d, endpoint=ENDPOINT, port=PORT, closed=PORT + 1))
        env = dict(os.environ, READYPROBE_MYSQL_PASSWORD=PASSWORD)
        venv = "/tmp/readyprobe-bench-venv"
        if not os.path.exists(f"{venv}/bin/python"):
            sh(sys.executable, "-m", "venv", venv)
            sh(f"{venv}/bin/pip", "install", "-q", "pymysql", stdout=subprocess.DEVNULL)
        sql = ("INSERT INTO readyprobe.canary (prober_id, branch, marker, seq, observed_at) "
               "VALUES (%s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE marker = VALUES(marker), "
               "seq = VALUES(seq), observed_at = VALUES(observed_at)",
               "SELECT marker, seq, @@hostname, @@server_id, @@read_only, @@innodb_read_only "
               "FROM readyprobe.canary WHERE prober_id = %s AND branch = %s")
        print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {ITER} iterations "
              f"in {BLOCKS} alternating blocks")
        arms = [("after", BIN)] + ([("before", BEFORE)] if BEFORE else [])
        sums = {name: [] for name, _ in arms}
        steps = {name: {} for name, _ in arms}
        firsts = {name: [] for name, _ in arms}
        times, pings = [], []
        per = ITER // BLOCKS
        for _ in range(BLOCKS):
            for name, binary in arms:
                # `per` attempts at 100 ms after the first (dropped: the process's first).
                s, st = readyprobe_run(binary, d, env, f"{per * 100 + 250}ms")
                sums[name] += s[1:]
                firsts[name].append(st["tls"][0])
                for step, xs in st.items():
                    steps[name].setdefault(step, []).extend(xs[1:])
            t, p = pymysql_loop(f"{venv}/bin/python", d, sql, per)
            times += t
            pings += p
        a = line("(a) readyprobe attempt, steps' sum", sums["after"])
        for step, xs in steps["after"].items():
            line(f"    its {step} step", xs)
        line("    the tls step of each run's first attempt", firsts["after"])
        b = line("(b) PyMySQL connect .. close", times)
        line("(c) mariadb CLI process wall time", cli_loop(d))
        ping = statistics.median(pings)
        print(f"(d) round-trip floor: 6 x COM_PING median {ping:.3f} ms = {6 * ping:.2f} ms")
        print(f"ratio readyprobe / PyMySQL: p50 {a[0] / b[0]:.2f}, p90 {a[1] / b[1]:.2f}")
        if BEFORE:
            old = line("(a') readyprobe BEFORE attempt, steps' sum", sums["before"])
            for step, xs in steps["before"].items():
                line(f"    its {step} step", xs)
            line("    the tls step of each run's first attempt", firsts["before"])
            print(f"ratio BEFORE / PyMySQL: p50 {old[0] / b[0]:.2f}, p90 {old[1] / b[1]:.2f}")
        for name, binary in arms:
            line(f"first attempt's tls step, `probe` ({name})", first_tls(binary, d, env))
    finally:
        subprocess.run([f"{HERE}/infra/local/mariadb.sh", "stop", db])
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
