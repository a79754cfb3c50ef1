#!/usr/bin/env python3
"""Helpers of bench/attempt_cost.sh: the local HTTP target, the blackbox_exporter load driver and
the summary of one kind's run. Standard library only; the TCP listeners and the /proc sampling
are bench/scale.py's.

  attempt_cost.py http-target PORT                 HTTP/1.1 on 127.0.0.1:PORT: any request gets
                                                   201 and its own body back
  attempt_cost.py drive URL MODULE TARGETS INTERVAL OUT
                                                   ask the exporter to probe every line of the file
                                                   TARGETS with MODULE once per INTERVAL s, spread
                                                   over the interval; OUT gets "ms ok failed late"
  attempt_cost.py summary DIR                      print the run's figures (and DIR/result.json)
  attempt_cost.py table DIR...                     the Markdown table of several kinds' results
"""
import asyncio
import json
import os
import sys
import time

from scale import drive  # the blackbox_exporter load driver, shared with bench/scale.sh

PER = 10_000  # attempts the figures are given per


def http_target(port):
    """Answers every request with 201 and the request's body (JSON in, the same JSON out), so a
    check that the answer carries the request's marker passes. Keeps a connection open for
    further requests until the client closes it."""

    async def serve(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                writer.write(b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=1024)
        print(f"listening on {port}", file=sys.stderr, flush=True)
        await server.serve_forever()

    asyncio.run(main())


def readyprobe_figures(d, rp):
    """Attempts started in the window of the samples `rp` (from `d`/state's evidence, its rotated
    generation included), and the process's CPU and memory over it."""
    hz = os.sysconf("SC_CLK_TCK")
    t0, t1 = rp[0][0], rp[-1][0]
    attempts = failed = 0
    classes = {}
    # The previous generation of a rotated evidence file first.
    for path in (f"{d}/state/evidence.jsonl.1", f"{d}/state/evidence.jsonl"):
        if not os.path.exists(path):
            continue
        for line in open(path):
            r = json.loads(line)
            if r.get("kind") == "attempt" and t0 <= r["started_at"] < t1:
                attempts += 1
                if r.get("result") != "success":
                    failed += 1
                    classes[r.get("class")] = classes.get(r.get("class"), 0) + 1
    cpu_s = (rp[-1][1] - rp[0][1]) / hz
    return {
        "window_s": round((t1 - t0) / 1000, 1),
        "attempts": attempts,
        "failed": failed,
        "failure_classes": classes,
        "cpu_s": cpu_s,
        "cpu_s_per_10k": round(cpu_s * PER / attempts, 3) if attempts else None,
        "rss_kb_max": max(r[2] for r in rp),
        "hwm_kb": rp[-1][3],
        "threads_max": max(r[4] for r in rp),
    }


def summary(d):
    meta = json.load(open(f"{d}/meta.json"))
    hz = os.sysconf("SC_CLK_TCK")

    def marks(name):
        return [list(map(int, l.split())) for l in open(f"{d}/{name}").read().splitlines()]

    res = {
        "kind": meta["kind"],
        "branches": meta["branches"],
        "interval_ms": meta["interval_ms"],
        "commit": meta.get("commit"),
        "load": meta.get("load", []),
    } | readyprobe_figures(d, marks("readyprobe.samples"))
    if os.path.exists(f"{d}/baseline.samples"):
        res["baseline"] = {"binary": meta.get("baseline")} | readyprobe_figures(
            f"{d}/baseline", marks("baseline.samples"))
    if os.path.exists(f"{d}/blackbox.samples"):
        bb = marks("blackbox.samples")
        drv = marks("driver.marks")
        probes = (drv[-1][1] - drv[0][1]) + (drv[-1][2] - drv[0][2])
        bb_cpu = (bb[-1][1] - bb[0][1]) / hz
        res["blackbox"] = {
            "probes": probes,
            "failed": drv[-1][2] - drv[0][2],
            "late": drv[-1][3] - drv[0][3],
            "cpu_s": bb_cpu,
            "cpu_s_per_10k": round(bb_cpu * PER / probes, 3) if probes else None,
            "rss_kb_max": max(r[2] for r in bb),
            "hwm_kb": bb[-1][3],
            "threads_max": max(r[4] for r in bb),
        }
        for r in (res, res.get("baseline")):
            if r and probes and r["attempts"] and bb_cpu:
                r["ratio_cpu"] = round(r["cpu_s_per_10k"] / res["blackbox"]["cpu_s_per_10k"], 3)
                r["ratio_hwm"] = round(r["hwm_kb"] / res["blackbox"]["hwm_kb"], 3)
    json.dump(res, open(f"{d}/result.json", "w"), indent=1)
    print(json.dumps(res))


def table(dirs):
    rows = [json.load(open(f"{d}/result.json")) for d in dirs]
    print("| kind | process | branches × interval | window | attempts (failed) | CPU per 10,000 attempts "
          "| VmHWM | RSS max | threads | ÷ blackbox: CPU per attempt | ÷ blackbox: VmHWM | load average |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        load = " → ".join(r["load"][::max(1, len(r["load"]) - 1)])
        procs = [(f"readyprobe `{r['commit']}`", r)]
        if r.get("baseline"):
            procs.append((f"readyprobe `{r['baseline']['binary']}`", r["baseline"]))
        if r.get("blackbox"):
            b = r["blackbox"]
            procs.append(("blackbox_exporter", b | {"attempts": b["probes"], "window_s": r["window_s"]}))
        for name, p in procs:
            ratio = (p.get("ratio_cpu", "—"), p.get("ratio_hwm", "—")) if name != "blackbox_exporter" else ("1", "1")
            print(f"| `{r['kind']}` | {name} | {r['branches']} × {r['interval_ms']} ms | {p['window_s']} s "
                  f"| {p['attempts']:,} ({p['failed']}) | {p['cpu_s_per_10k']:.3f} s | {p['hwm_kb']:,} kB "
                  f"| {p['rss_kb_max']:,} kB | {p['threads_max']} | {ratio[0]} | {ratio[1]} | {load} |")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "http-target":
        http_target(int(args[0]))
    elif cmd == "drive":
        targets = [t for t in open(args[2]).read().split() if t]
        drive(args[0], args[1], targets, float(args[3]), args[4], 8)
    elif cmd == "summary":
        summary(args[0])
    elif cmd == "table":
        table(args)
    else:
        sys.exit(f"unknown command {cmd}")
