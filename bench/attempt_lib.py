"""What bench/mysql_attempt.py and bench/postgres_attempt.py share: running a command, a test CA
and a server certificate for one name, and the percentile lines they print."""
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
