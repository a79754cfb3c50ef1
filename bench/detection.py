#!/usr/bin/env python3
"""Helpers of bench/detection.sh: one measured run, and the summary of all runs.

  detection.py run --kind K --dir DIR --bin BIN --fault CMD --warm S --endpoint URL
                   [--localstack-log FILE]
      start `BIN run` on DIR/detect.toml, wait until the writer has been probed for S seconds,
      then a random part of an interval, run CMD (bash) and take the fault instant when it
      returns; wait for the unready transition and its cloudwatch `publish` record; read the
      datum back from the emulator (GetMetricData); stop the prober. Writes DIR/result.json.
  detection.py summary OUT
      a Markdown table per run and per kind (median, max) of every OUT/*/result.json.

Times are ms since the UNIX epoch, as in the evidence. Needs boto3 (the cross-check).
"""
import argparse
import glob
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
import tomllib
from datetime import datetime, timezone


def now_ms():
    return int(time.time() * 1000)


def duration_ms(s):
    """A humantime duration of the forms the config uses here: 2s, 1600ms, 1m, 1m30s."""
    total = 0
    for n, unit in re.findall(r"(\d+)(ms|s|m|h)", s):
        total += int(n) * {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}[unit]
    return total


class Evidence:
    """Reads the evidence file as it grows (whole lines only)."""

    def __init__(self, path):
        self.path, self.pos, self.records, self.partial = path, 0, [], b""

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self.pos += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        new = [json.loads(line) for line in lines if line.strip()]
        self.records += new
        return new

    def of(self, kind):
        return [r for r in self.records if r["kind"] == kind]


def wait_for(pred, timeout_s, proc, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        if proc.poll() is not None:
            sys.exit(f"detection: readyprobe exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.05)
    sys.exit(f"detection: no {what} within {timeout_s} s")


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def localstack_accept(log_path, lo, hi):
    """Instants of `PutMetricData => 200` lines the emulator logged in [lo, hi] (its log's
    times are UTC, ms). Other clients of the same emulator log the same line: the caller takes
    the latest one not after the publish record."""
    out = []
    if not log_path or not os.path.exists(log_path):
        return out
    pat = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}).*cloudwatch\.PutMetricData => 200")
    with open(log_path, errors="replace") as f:
        for line in f:
            m = pat.match(line)
            if m:
                t = datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc)
                ms = int(t.timestamp() * 1000)
                if lo <= ms <= hi:
                    out.append(ms)
    return out


def read_back(endpoint, namespace, service, branch, at_ms):
    """The Readiness datums the emulator holds for the branch around `at_ms`: (ms, Minimum)."""
    import boto3

    cw = boto3.client("cloudwatch", endpoint_url=endpoint, region_name="us-east-1")
    start = datetime.fromtimestamp((at_ms - 120_000) / 1000, timezone.utc)
    end = datetime.fromtimestamp((at_ms + 60_000) / 1000, timezone.utc)
    dims = [{"Name": "Service", "Value": service}, {"Name": "Branch", "Value": branch}]
    res = cw.get_metric_data(
        MetricDataQueries=[{
            "Id": "r",
            "MetricStat": {
                "Metric": {"Namespace": namespace, "MetricName": "Readiness", "Dimensions": dims},
                "Period": 1,
                "Stat": "Minimum",
            },
        }],
        StartTime=start,
        EndTime=end,
        ScanBy="TimestampAscending",
    )["MetricDataResults"][0]
    return [(int(t.timestamp() * 1000), v) for t, v in zip(res["Timestamps"], res["Values"])]


def run(a):
    cfg = tomllib.load(open(f"{a.dir}/detect.toml", "rb"))
    interval = duration_ms(cfg["probe"]["interval"])
    unready = cfg["readiness"]["declare_unready"]
    hold = duration_ms(unready["definitive_for"] if a.kind == "readonly" else unready["for"])
    budget_s = (hold + 10 * interval) / 1000 + 60
    log = open(f"{a.dir}/readyprobe.log", "w")
    proc = subprocess.Popen(
        [a.bin, "run", "--config", "detect.toml", "--duration", f"{int(a.warm + budget_s + 60)}s"],
        cwd=a.dir, stdout=subprocess.DEVNULL, stderr=log)
    ev = Evidence(f"{a.dir}/state/evidence.jsonl")
    try:
        wait_for(lambda: ev.poll() or ev.of("start"), 30, proc, "start record")
        t_start = ev.of("start")[0]["at_ms"]
        # Healthy probing for `warm` seconds (the window full of successes), then a random
        # phase within an interval so the fault lands anywhere in the probe schedule.
        while now_ms() < t_start + a.warm * 1000:
            ev.poll()
            if proc.poll() is not None:
                sys.exit("detection: readyprobe exited during the warm-up")
            time.sleep(0.2)
        time.sleep(random.uniform(0, interval / 1000))
        ev.poll()
        warm_failed = sum(1 for r in ev.of("attempt") if r["result"] != "success")
        subprocess.run(["bash", "-c", a.fault], check=True)
        t_fault = now_ms()

        def transition():
            ev.poll()
            t = [r for r in ev.of("transition") if r["transition"]["to"] == "unready"]
            if not t:
                return None
            seq, batch = t[0]["record_seq"], t[0].get("batch")
            # The batch that published it; evidence without batch ids: the next transition batch.
            p = [r for r in ev.of("publish") if r["sink"] == "cloudwatch" and (
                 r.get("batch") == batch if batch is not None
                 else r["record_seq"] > seq and r["reason"] == "transition")]
            return (t[0], p[0]) if p else None

        tr, pub = wait_for(transition, budget_s, proc, "unready transition and its publish record")
    finally:
        stop(proc)
        log.close()
    ev.poll()
    attempts = sorted(ev.of("attempt"), key=lambda r: r["started_at"])
    failed = [r for r in attempts if r["result"] != "success" and r["finished_at"] >= t_fault]
    first = failed[0] if failed else None
    t = tr["transition"]
    ns = cfg["publish"]["namespace"]
    datums = read_back(a.endpoint, ns, cfg["service"]["name"], tr["branch"], t["at"])
    zero = [ts for ts, v in datums if v == 0.0]
    accepts = [ms for ms in localstack_accept(a.localstack_log, t["at"], pub["at_ms"] + 5)
               if ms <= pub["at_ms"] + 5]
    res = {
        "run": os.path.basename(os.path.normpath(a.dir)),
        "kind": a.kind,
        "interval_ms": interval,
        "hold_ms": hold,
        "hold_key": "definitive_for" if a.kind == "readonly" else "for",
        "warm_failed_attempts": warm_failed,
        "fault_ms": t_fault,
        "first_failure": first and {
            "started_at": first["started_at"], "finished_at": first["finished_at"],
            "step": first.get("step"), "class": first.get("class")},
        "failed_attempts_before_transition": sum(1 for r in failed if r["finished_at"] <= t["at"]),
        "transition_at": t["at"],
        "held_since": t.get("held_since"),
        "reason": t["reason"],
        "publish": {k: pub[k] for k in ("at_ms", "outcome", "tries", "datums", "sent")},
        "emulator_log_accept_ms": max(accepts) if accepts else None,
        "emulator_zero_datum_ms": zero[0] if zero else None,
        "emulator_datums": datums,
    }
    fp = first["finished_at"] if first else None
    res["ms"] = {
        "fault_to_first_failure_end": fp - t_fault if fp else None,
        "fault_to_condition": t["held_since"] - t_fault if t.get("held_since") else None,
        "fault_to_transition": t["at"] - t_fault,
        "transition_to_accepted": pub["at_ms"] - t["at"],
        "fault_to_accepted": pub["at_ms"] - t_fault,
        "overhead": pub["at_ms"] - t_fault - hold,
        "emulator_log_to_record": pub["at_ms"] - max(accepts) if accepts else None,
    }
    json.dump(res, open(f"{a.dir}/result.json", "w"), indent=1)
    print(json.dumps({"dir": a.dir, **res["ms"], "class": first and first.get("class"),
                      "datum_0": res["emulator_zero_datum_ms"] is not None}), flush=True)
    if pub["outcome"] != "sent" or not zero:
        sys.exit("detection: the 0 datum was not accepted (see result.json)")


MS_COLS = ("late", "transition_to_accepted")


def fmt(v):
    return "–" if v is None else f"{v / 1000:.2f}"


def late(r):
    """How long after its `for` ran out the rule fired, ms: from the first failure (definitive:
    the run of definitive failures starts there) or from `held_since` (ambiguous: the condition's
    clock) to the transition, less the `for` that applies. About one interval when the attempt
    that should have fired it finished a few ms short of the `for`."""
    anchor = r["held_since"] if r["hold_key"] == "for" else (r["first_failure"] or {}).get("finished_at")
    return None if anchor is None else r["transition_at"] - anchor - r["hold_ms"]


def summary(out):
    rows = []
    for p in sorted(glob.glob(f"{out}/*/result.json")):
        cfg = tomllib.load(open(os.path.join(os.path.dirname(p), "detect.toml"), "rb"))
        rows.append(dict(json.load(open(p)), window=cfg["readiness"]["window"]))
    cols = ["fault_to_first_failure_end", "fault_to_condition", "fault_to_transition",
            "late", "transition_to_accepted", "fault_to_accepted", "overhead"]
    head = ["first failure ends", "condition holds", "transition", "late", "transition → accepted",
            "fault → accepted", "overhead"]
    print("Seconds after the fault; late: how long after its `for` ran out the rule fired;"
          " overhead: fault → accepted − that `for`.\n")
    print("| run | class | " + " | ".join(head) + " | datum 0 read back | emulator log → record |")
    print("| --- | --- |" + " ---: |" * len(cols) + " --- | ---: |")
    by_kind = {}
    for r in rows:
        m = dict(r["ms"], late=late(r))
        key = (r["kind"], r["hold_key"], r["hold_ms"], r["window"], r["interval_ms"])
        by_kind.setdefault(key, []).append(m)
        cls = (r["first_failure"] or {}).get("class")
        back = "yes" if r["emulator_zero_datum_ms"] is not None else "NO"
        log = "–" if m["emulator_log_to_record"] is None else f"{m['emulator_log_to_record']} ms"
        cells = [f"{m[c]} ms" if c in MS_COLS and m[c] is not None else fmt(m[c]) for c in cols]
        print(f"| {r['run']} | {cls} | " + " | ".join(cells) + f" | {back} | {log} |")
    print("\n| kind | runs | `for` applied, window | fault → accepted, median / max | overhead, median / max |"
          " target (interval + 1 s) |")
    print("| --- | ---: | --- | --- | --- | --- |")
    for (kind, key, hold, window, interval), ms in by_kind.items():
        tot = [m["fault_to_accepted"] for m in ms]
        ovh = [m["overhead"] for m in ms]
        target = interval + 1000
        ok = "met" if max(ovh) <= target else f"missed in {sum(o > target for o in ovh)} of {len(ovh)}"
        print(f"| {kind} | {len(ms)} | {key} = {hold / 1000:g} s, {window} | {fmt(statistics.median(tot))} / "
              f"{fmt(max(tot))} | {fmt(statistics.median(ovh))} / {fmt(max(ovh))} | {ok} |")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--kind", required=True, choices=["readonly", "blackhole"])
    r.add_argument("--dir", required=True)
    r.add_argument("--bin", required=True)
    r.add_argument("--fault", required=True)
    r.add_argument("--warm", type=float, required=True)
    r.add_argument("--endpoint", required=True)
    r.add_argument("--localstack-log")
    s = sub.add_parser("summary")
    s.add_argument("out")
    args = p.parse_args()
    run(args) if args.cmd == "run" else summary(args.out)
