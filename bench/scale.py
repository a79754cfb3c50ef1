#!/usr/bin/env python3
"""Helpers of bench/scale.sh: local TCP targets, the blackbox_exporter load driver, /proc
sampling and the summary of one run. Standard library only.

  scale.py listen BASE N                  accept on 127.0.0.1:BASE..BASE+N-1, close each connection
  scale.py drive URL N BASE INTERVAL OUT  ask the exporter to probe every target once per INTERVAL s,
                                          spread over the interval; OUT gets "ms ok failed late"
  scale.py scrape URL EVERY OUT           GET URL (/metrics) every EVERY s as Prometheus does; OUT
                                          gets one JSON line per answer (bytes, series, seconds)
  scale.py sample PID                     one line: ms utime+stime(ticks) VmRSS VmHWM Threads (kB)
  scale.py summary DIR                    print the run's figures (and DIR/result.json)
"""
import asyncio
import collections
import http.client
import json
import os
import sys
import time
import urllib.parse


def listen(base, n):
    async def close(_reader, writer):
        writer.close()

    async def main():
        servers = [
            await asyncio.start_server(close, "127.0.0.1", base + i, backlog=1024)
            for i in range(n)
        ]
        print(f"listening on {n} ports from {base}", file=sys.stderr, flush=True)
        await asyncio.gather(*(s.serve_forever() for s in servers))

    asyncio.run(main())


def drive(url, module, targets, interval, out, connections):
    """Ask the exporter to probe target i of n (with `module`) at start + k × interval + i ×
    interval / n, over `connections` keep-alive connections; a request issued after its slot by more
    than 10 % of the interval counts as late (the driver could not keep up). OUT gets "ms ok
    failed late", rewritten every 0.5 s."""
    n = len(targets)
    host, port = url.split("//", 1)[1].split(":")
    counts = {"ok": 0, "failed": 0, "late": 0}
    queue = asyncio.Queue()
    paths = [f"/probe?module={module}&target={urllib.parse.quote(t, safe='')}" for t in targets]

    async def worker():
        reader, writer = await asyncio.open_connection(host, int(port))
        while True:
            i = await queue.get()
            writer.write(f"GET {paths[i]} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length, chunked = 0, False
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                elif name.lower() == b"transfer-encoding":
                    chunked = b"chunked" in value.lower()
            body = b""
            if chunked:  # the exporter chunks an answer too large for its buffer (the http module's)
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                    body += (await reader.readexactly(size + 2))[:-2]
                await reader.readuntil(b"\r\n")
            else:
                body = await reader.readexactly(length)
            ok = head.startswith(b"HTTP/1.1 200") and b"\nprobe_success 1" in body
            counts["ok" if ok else "failed"] += 1

    async def report():
        while True:
            tmp = out + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{int(time.time() * 1000)} {counts['ok']} {counts['failed']} {counts['late']}\n")
            os.replace(tmp, out)
            await asyncio.sleep(0.5)

    async def main():
        workers = [asyncio.create_task(worker()) for _ in range(connections)]
        reporter = asyncio.create_task(report())
        start = time.monotonic() + 0.5
        step = interval / n
        k = 0
        while True:
            slot = start + k * step
            now = time.monotonic()
            if slot > now:
                await asyncio.sleep(slot - now)
            elif now - slot > interval / 10:
                counts["late"] += 1
            queue.put_nowait(k % n)
            k += 1
            for w in workers + [reporter]:
                if w.done():
                    w.result()  # raises the worker's error

    asyncio.run(main())


# The Accept header Prometheus sends (OpenMetrics first, the 0.0.4 text as a fallback).
PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


def scrape(url, every, out):
    """GET `url` every `every` s from now on (a slot missed by a slow answer is skipped, as
    Prometheus does) and append one JSON line per answer to `out`: status, content type, bytes,
    series (lines not starting with `#`), whether the text ends with `# EOF`, and the seconds from
    the connect to the first byte of the answer and to its last byte. No timeout below 120 s: a slow
    answer is measured, not cut (Prometheus's default scrape_timeout is 10 s)."""
    host_port, _, path = url.split("//", 1)[1].partition("/")
    host, port = host_port.split(":")
    start = time.monotonic()
    k = 0
    while True:
        at = int(time.time() * 1000)
        t0 = time.monotonic()
        rec = {"at_ms": at}
        try:
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            conn.request("GET", "/" + path, headers={"Accept": PROMETHEUS_ACCEPT})
            resp = conn.getresponse()
            t1 = time.monotonic()
            body = resp.read()
            t2 = time.monotonic()
            conn.close()
            rec |= {
                "status": resp.status,
                "content_type": resp.getheader("Content-Type"),
                "bytes": len(body),
                "series": sum(1 for l in body.split(b"\n") if l and not l.startswith(b"#")),
                "eof": body.endswith(b"# EOF\n"),
                "first_byte_s": round(t1 - t0, 4),
                "last_byte_s": round(t2 - t0, 4),
            }
        except (OSError, http.client.HTTPException) as e:
            rec |= {"error": repr(e), "last_byte_s": round(time.monotonic() - t0, 4)}
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        k = max(k + 1, int((time.monotonic() - start) / every) + 1)
        time.sleep(max(0.0, start + k * every - time.monotonic()))


def sample(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            status[key] = value.split()[0] if value.split() else ""
    print(int(time.time() * 1000), ticks, status["VmRSS"], status["VmHWM"], status["Threads"])


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def scrape_summary(path):
    """The figures of the steady window's scrapes: counts, answer sizes and times (s)."""
    recs = [json.loads(l) for l in open(path).read().splitlines()]
    ok = [r for r in recs if r.get("status") == 200]
    times = [r["last_byte_s"] for r in ok]
    return {
        "scrapes": len(recs),
        "ok": len(ok),
        "errors": [r.get("error") or r.get("status") for r in recs if r not in ok],
        "without_eof": sum(1 for r in ok if not r["eof"]),
        "content_type": sorted({r["content_type"] for r in ok}),
        "bytes": {"min": min((r["bytes"] for r in ok), default=None), "max": max((r["bytes"] for r in ok), default=None)},
        "series": {"min": min((r["series"] for r in ok), default=None), "max": max((r["series"] for r in ok), default=None)},
        "first_byte_s": {"p50": pct([r["first_byte_s"] for r in ok], .5), "max": max((r["first_byte_s"] for r in ok), default=None)},
        "last_byte_s": {"p50": pct(times, .5), "max": max(times, default=None)},
    }


def summary(d):
    meta = json.load(open(f"{d}/meta.json"))
    interval_ms = meta["interval_s"] * 1000
    hz = os.sysconf("SC_CLK_TCK")

    def marks(name):
        return [list(map(int, l.split())) for l in open(f"{d}/{name}").read().splitlines()]

    rp = marks("readyprobe.samples")
    t0, t1 = rp[0][0], rp[-1][0]
    starts = collections.defaultdict(list)
    attempts = failed = 0
    datums = []
    publishes = collections.Counter()
    # The evidence rotates at evidence_max_bytes (100 MB at 10,000 branches in about three
    # minutes): the previous generation first.
    files = [p for p in (f"{d}/state/evidence.jsonl.1", f"{d}/state/evidence.jsonl") if os.path.exists(p)]
    for path in files:
        for line in open(path):
            r = json.loads(line)
            kind = r.get("kind")
            if kind == "attempt":
                starts[(r["service"], r["branch"])].append(r["started_at"])
                if t0 <= r["started_at"] < t1:
                    attempts += 1
                    failed += r.get("result") != "success"
            elif kind == "publish" and t0 <= r["at_ms"] < t1:
                publishes[(r["sink"], r["reason"], r["outcome"])] += 1
                if r["reason"] == "tick":
                    datums.append(r["datums"])
    gaps, skipped = [], 0
    for s in starts.values():
        s.sort()
        for a, b in zip(s, s[1:]):
            if a < t0 or b >= t1:
                continue
            if b - a >= 1.5 * interval_ms:
                skipped += round((b - a) / interval_ms) - 1
            else:
                gaps.append(abs(b - a - interval_ms))
    cpu_s = (rp[-1][1] - rp[0][1]) / hz
    res = {
        "kind": meta["kind"],
        "probe_jitter": meta.get("jitter"),
        "branches": meta["branches"],
        "services": meta["branches"] // 2,
        "window_s": round((t1 - t0) / 1000, 1),
        "branches_with_attempts": len(starts),
        "attempts": attempts,
        "failed": failed,
        "cpu_s": cpu_s,
        "cpu_ms_per_attempt": round(cpu_s * 1000 / attempts, 4) if attempts else None,
        "cpu_pct_of_one_core": round(cpu_s * 100_000 / (t1 - t0), 1),
        "rss_kb_max": max(r[2] for r in rp),
        "hwm_kb": rp[-1][3],
        "threads_max": max(r[4] for r in rp),
        "gaps": len(gaps),
        "skipped_ticks": skipped,
        "jitter_ms": {q: pct(gaps, v) for q, v in (("p50", .5), ("p99", .99))} | {"max": max(gaps, default=None)},
        "tick_batches_datums": datums,
        "publish_records": {"/".join(k): v for k, v in publishes.items()},
        "load": meta.get("load", []),
    }
    res["jitter_pct"] = {q: round(v * 100 / interval_ms, 3) for q, v in res["jitter_ms"].items() if v is not None}
    if os.path.exists(f"{d}/blackbox.samples"):
        bb = marks("blackbox.samples")
        drv = marks("driver.marks")
        probes = drv[-1][1] - drv[0][1]
        bb_cpu = (bb[-1][1] - bb[0][1]) / hz
        res["blackbox"] = {
            "probes": probes,
            "failed": drv[-1][2] - drv[0][2],
            "late": drv[-1][3] - drv[0][3],
            "cpu_s": bb_cpu,
            "cpu_ms_per_probe": round(bb_cpu * 1000 / probes, 4) if probes else None,
            "rss_kb_max": max(r[2] for r in bb),
            "threads_max": max(r[4] for r in bb),
        }
        if probes and attempts and bb_cpu:
            res["ratio_cpu_per_attempt"] = round(res["cpu_ms_per_attempt"] / res["blackbox"]["cpu_ms_per_probe"], 3)
    res["serve"] = meta.get("serve", False)
    if os.path.exists(f"{d}/scrapes.jsonl"):
        res["scrapes"] = scrape_summary(f"{d}/scrapes.jsonl")
    json.dump(res, open(f"{d}/result.json", "w"), indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "listen":
        listen(int(args[0]), int(args[1]))
    elif cmd == "drive":
        n, base = int(args[1]), int(args[2])
        targets = [f"127.0.0.1:{base + i}" for i in range(n)]
        drive(args[0], "tcp", targets, float(args[3]), args[4], min(32, max(2, n // 100)))
    elif cmd == "scrape":
        scrape(args[0], float(args[1]), args[2])
    elif cmd == "sample":
        sample(args[0])
    elif cmd == "summary":
        summary(args[0])
    else:
        sys.exit(f"unknown command {cmd}")
