"""What bench/mysql_attempt.py and bench/postgres_attempt.py share: running a command, a test CA
and a server certificate for one name, a timed `readyprobe run`, and the percentile lines."""
import json
import shutil
import subprocess


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def certs(d, endpoint):
    """A P-256 CA (`ca.pem`) and a certificate for `endpoint` and 127.0.0.1 (`db.pem`, `db.key`)."""
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
       "-nodes", "-days", "2", "-subj", "/CN=readyprobe bench CA", "-keyout", f"{d}/ca.key",
       "-out", f"{d}/ca.pem", capture_output=True)
    sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-subj", f"/CN={endpoint}", "-keyout", f"{d}/db.key", "-out", f"{d}/db.csr",
       capture_output=True)
    with open(f"{d}/db.ext", "w") as f:
        f.write(f"subjectAltName=DNS:{endpoint},IP:127.0.0.1\n")
    sh("openssl", "x509", "-req", "-in", f"{d}/db.csr", "-CA", f"{d}/ca.pem", "-CAkey",
       f"{d}/ca.key", "-CAcreateserial", "-days", "2", "-extfile", f"{d}/db.ext", "-out",
       f"{d}/db.pem", capture_output=True)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def line(name, xs):
    print(f"{name:<44} n={len(xs):<4} p50 {pct(xs, 50):7.2f} ms  p90 {pct(xs, 90):7.2f} ms")
    return pct(xs, 50), pct(xs, 90)


def readyprobe_run(binary, d, env, duration):
    """One `run` of `duration` with `d/bench.toml`: its attempts' step sums, and each step's
    durations, of branch `primary`; the first attempt of the process first."""
    state = f"{d}/state"
    shutil.rmtree(state, ignore_errors=True)
    sh(binary, "run", "--config", f"{d}/bench.toml", "--duration", duration, env=env,
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sums, steps = [], {}
    with open(f"{state}/evidence.jsonl") as f:
        for raw in f:
            r = json.loads(raw)
            if r.get("kind") != "attempt" or r.get("branch") != "primary":
                continue
            if r.get("result") != "success":
                # Kept, with the time it took until it failed (a lower bound): counted.
                print(f"    a failed attempt: {r.get('step')} {r.get('class')}")
            sums.append(sum(s["duration_ms"] for s in r["steps"]))
            for s in r["steps"]:
                steps.setdefault(s["step"], []).append(s["duration_ms"])
    return sums, steps
