#!/usr/bin/env python3
"""A `postgres` attempt beside a client: against one throwaway PostgreSQL with TLS on loopback,
the same work (connect, TLS with the certificate and name verified, SCRAM-SHA-256, the canary
upsert, the read-back SELECT, disconnect) timed ITER times each by:

  (a) readyprobe: `run` at a 100 ms interval; each attempt's step durations from the evidence
      (sum of resolve .. verify; the first attempt of each process dropped);
  (b) psycopg 3 (in a venv under /var/cache/readyprobe), perf_counter around connect(sslmode=
      verify-full) .. close at the same 100 ms pace, autocommit;
  (c) `psql -c "...; ..."`, process wall time;
  (d) the round-trip floor: the median `SELECT 1` round trip on an open psycopg session, times
      the seven exchanges of an attempt (TCP handshake, SSLRequest, TLS 1.3 handshake, startup and
      SASL first, SASL final, upsert, select).

(a) and (b) alternate in BLOCKS blocks so both see the same load of a shared machine. PostgreSQL's
initdb and pg_ctl refuse root: they run as the `postgres` user (runuser).

    bench/postgres_attempt.py [BIN] [ITER]    # defaults: target/release/readyprobe, 200
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
BLOCKS = int(os.environ.get("BLOCKS", "10"))
PORT = int(os.environ.get("DB_PORT", "54391"))
VENV = os.environ.get("PG_BENCH_VENV", "/var/cache/readyprobe/pg-bench-venv")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PASSWORD = os.urandom(12).hex()
ENDPOINT = "pg-primary.localhost"
BINDIR = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True,
                        check=True).stdout.strip()



def as_postgres(*args, **kw):
    return sh("runuser", "-u", "postgres", "--", *args, cwd="/", **kw)



def start_cluster(d):
    data = f"{d}/data"
    os.chmod(d, 0o755)
    os.makedirs(data)
    shutil.chown(data, "postgres", "postgres")
    as_postgres(f"{BINDIR}/initdb", "-D", data, "-A", "trust", "-U", "postgres",
                stdout=subprocess.DEVNULL)
    for src, dst in ((f"{d}/db.pem", "server.crt"), (f"{d}/db.key", "server.key")):
        shutil.copy(src, f"{data}/{dst}")
        shutil.chown(f"{data}/{dst}", "postgres", "postgres")
        os.chmod(f"{data}/{dst}", 0o600)
    with open(f"{data}/postgresql.conf", "a") as f:
        f.write(f"\nlisten_addresses = '127.0.0.1'\nport = {PORT}\nunix_socket_directories = '{data}'\n"
                "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
                "password_encryption = scram-sha-256\n")
    with open(f"{data}/pg_hba.conf", "w") as f:
        f.write("local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n")
    as_postgres(f"{BINDIR}/pg_ctl", "-D", data, "-l", f"{data}/server.log", "-w", "start",
                stdout=subprocess.DEVNULL)
    with open(f"{HERE}/probes/postgres-canary.sql") as f:
        script = f.read().replace("@PASSWORD@", PASSWORD)
    sh(f"{BINDIR}/psql", "-h", data, "-p", str(PORT), "-U", "postgres", "-d", "postgres", "-q",
       "-v", "ON_ERROR_STOP=1", input=script, text=True, stdout=subprocess.DEVNULL)
    return data


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
kind = "postgres"
interval = "100ms"
timeout = "90ms"

[probe.tls]
ssl_mode = "verify_identity"
ssl_ca = "{d}/ca.pem"

[probe.postgres]
user = "readyprobe"
password = {{ env = "READYPROBE_PG_PASSWORD" }}

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "{endpoint}"
port = {port}

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "pg-secondary.localhost"
port = {closed}
"""

UPSERT = ("INSERT INTO public.canary (prober_id, branch, marker, seq, observed_at) "
          "VALUES ({p}, {b}, {m}, {s}, now()) ON CONFLICT (prober_id, branch) DO UPDATE SET "
          "marker = EXCLUDED.marker, seq = EXCLUDED.seq, observed_at = EXCLUDED.observed_at")
SELECT = ("SELECT marker, seq::text, current_setting('transaction_read_only'), "
          "pg_is_in_recovery(), COALESCE(NULLIF(current_setting('cluster_name'), ''), "
          "host(inet_server_addr()), '') FROM public.canary WHERE prober_id = {p} AND branch = {b}")




def psycopg_loop(d, n):
    """n psycopg attempts 100 ms apart (readyprobe's pace), after one unmeasured, then n pings."""
    upsert = UPSERT.format(p="%s", b="%s", m="%s", s="%s")
    select = SELECT.format(p="%s", b="%s")
    code = f"""
import psycopg, time, json
dsn = ("host=127.0.0.1 port={PORT} user=readyprobe password={PASSWORD} dbname=readyprobe "
       "sslmode=verify-full sslrootcert={d}/ca.pem")
times, pings = [], []
for i in range({n} + 1):
    time.sleep(0.1 - time.time() % 0.1)
    t = time.perf_counter()
    c = psycopg.connect(dsn, autocommit=True)
    c.execute({upsert!r}, ("bench", "psycopg", "%032x" % i, i))
    assert c.execute({select!r}, ("bench", "psycopg")).fetchone()[0] == "%032x" % i
    c.close()
    times.append((time.perf_counter() - t) * 1000)
times = times[1:]
c = psycopg.connect(dsn, autocommit=True)
for i in range({n}):
    t = time.perf_counter()
    c.execute("SELECT 1").fetchone()
    pings.append((time.perf_counter() - t) * 1000)
c.close()
print(json.dumps([times, pings]))
"""
    # psycopg's libpq must not resolve ENDPOINT: it connects to 127.0.0.1 and checks the
    # certificate's IP address (verify-full), as readyprobe checks the name.
    out = subprocess.run([f"{VENV}/bin/python", "-c", code], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def psql_loop(d):
    env = dict(os.environ, PGPASSWORD=PASSWORD)
    times = []
    for i in range(ITER):
        lit = lambda s: f"'{s}'"
        sql = (UPSERT.format(p=lit("bench"), b=lit("psql"), m=lit(f"{i:032x}"), s=i) + "; "
               + SELECT.format(p=lit("bench"), b=lit("psql")))
        t = time.perf_counter()
        p = subprocess.run([f"{BINDIR}/psql", f"host=127.0.0.1 port={PORT} user=readyprobe "
                            f"dbname=readyprobe sslmode=verify-full sslrootcert={d}/ca.pem",
                            "-X", "-q", "-A", "-t", "-c", sql],
                           env=env, capture_output=True, text=True)
        times.append((time.perf_counter() - t) * 1000)
        if p.returncode != 0 or f"{i:032x}" not in p.stdout:
            sys.exit(f"postgres_attempt: psql failed: {p.stderr}")
    return times


def main():
    if not os.path.exists(f"{VENV}/bin/python"):
        sh(sys.executable, "-m", "venv", VENV)
        sh(f"{VENV}/bin/pip", "install", "-q", "psycopg[binary]", stdout=subprocess.DEVNULL)
    d = tempfile.mkdtemp(prefix="readyprobe-pg-attempt-")
    data = None
    try:
        certs(d, ENDPOINT)
        data = start_cluster(d)
        with open(f"{d}/bench.toml", "w") as f:
            f.write(CONFIG.format(d=d, endpoint=ENDPOINT, port=PORT, closed=PORT + 1))
        env = dict(os.environ, READYPROBE_PG_PASSWORD=PASSWORD)
        print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {ITER} iterations "
              f"in {BLOCKS} alternating blocks")
        sums, steps, times, pings = [], {}, [], []
        per = ITER // BLOCKS
        for _ in range(BLOCKS):
            s, st = readyprobe_run(BIN, d, env, f"{per * 100 + 250}ms")
            sums += s[1:]
            for step, xs in st.items():
                steps.setdefault(step, []).extend(xs[1:])
            t, p = psycopg_loop(d, per)
            times += t
            pings += p
        a = line("(a) readyprobe attempt, steps' sum", sums)
        for step, xs in steps.items():
            line(f"    its {step} step", xs)
        b = line("(b) psycopg connect .. close", times)
        line("(c) psql process wall time", psql_loop(d))
        ping = statistics.median(pings)
        print(f"(d) round-trip floor: 7 x SELECT 1 median {ping:.3f} ms = {7 * ping:.2f} ms")
        print(f"ratio readyprobe / psycopg: p50 {a[0] / b[0]:.2f}, p90 {a[1] / b[1]:.2f}")
    finally:
        if data:
            subprocess.run(["runuser", "-u", "postgres", "--", f"{BINDIR}/pg_ctl", "-D", data,
                            "-m", "immediate", "stop"], cwd="/", stdout=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
