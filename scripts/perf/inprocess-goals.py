#!/usr/bin/env python3
"""The in-process fabric near its limit, against the goals (loop0 <-> loop1).

    scripts/perf/inprocess-goals.py [--repeat R] [--no-build]

  cycles/s      ibcm-loopbench -w 1000 -t 3 (closed loop: create id, REQ/REP/RTU,
                DREQ/DREP, destroy; 1000 in flight), -w 1 (one at a time) and
                -w 1 -p 50 (one at a time, the tool's thread polling for the
                finished cycle for 50 us before it sleeps) and -w 1 --chain
                (each cycle started in the last one's DREP handler, on the
                library's worker: the library's own cost, no thread hop)
  dreq->drep    ibcm-cmtime --sequential -c 10000: the disconnect p50, one
                connection at a time, DREQ sent from the application thread
  memory        ibcm-cmtime -c 100000: RSS growth from before the ids are
                created to all 100,000 connections established, per cm_id
  disconnect    the same run: the disconnect phase total for all 100,000

Each measurement runs R times (default 3); the table gives the median and the
range. Results go to build/perf/inprocess.json. Benchmarks, not tests: nothing
fails on a missed goal.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.join(ROOT, "build", "stage", "lib"))


def run(*argv):
    p = subprocess.run([os.path.join(ROOT, "build", "c", argv[0]), *argv[1:], "--json"],
                       env=ENV, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout)


def phase(r, name):
    return next(p for p in r["phases"] if p["phase"] == name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    if not args.no_build:
        subprocess.run(["make", "-s", "-C", ROOT, "c-build"], check=True, stdout=subprocess.DEVNULL)

    R = args.repeat
    m = {}
    m["cycles_w1000"] = [run("ibcm-loopbench", "-w", "1000", "-t", "3") for _ in range(R)]
    m["cycles_w1"] = [run("ibcm-loopbench", "-w", "1", "-t", "3") for _ in range(R)]
    m["cycles_w1_poll"] = [run("ibcm-loopbench", "-w", "1", "-t", "3", "-p", "50")
                           for _ in range(R)]
    m["cycles_w1_chain"] = [run("ibcm-loopbench", "-w", "1", "-t", "3", "--chain")
                            for _ in range(R)]
    m["sequential"] = [run("ibcm-cmtime", "--sequential", "-c", "10000") for _ in range(R)]
    m["live_100k"] = [run("ibcm-cmtime", "-c", "100000") for _ in range(R)]
    m["phased_10k"] = [run("ibcm-cmtime", "-c", "10000") for _ in range(R)]

    def stat(values):
        return statistics.median(values), min(values), max(values)

    rows = []

    def goal(name, values, fmt, target, ok):
        med, lo, hi = stat(values)
        rows.append((name, fmt.format(med), f"{fmt.format(lo)} .. {fmt.format(hi)}", target,
                     "" if target == "(info)" else "met" if ok(med) else "MISSED"))

    goal("connect+disconnect cycles/s (closed loop, 1000 in flight)",
         [r["cycles_per_sec"] for r in m["cycles_w1000"]], "{:,.0f}", ">= 100,000",
         lambda v: v >= 100_000)
    goal("connect+disconnect cycles/s (one at a time)",
         [r["cycles_per_sec"] for r in m["cycles_w1"]], "{:,.0f}", ">= 100,000",
         lambda v: v >= 100_000)
    goal("same, the tool's thread polling 50 us before it sleeps (-p 50)",
         [r["cycles_per_sec"] for r in m["cycles_w1_poll"]], "{:,.0f}", "(info)",
         lambda v: True)
    goal("same, each cycle started in the DREP handler (--chain)",
         [r["cycles_per_sec"] for r in m["cycles_w1_chain"]], "{:,.0f}", "(info)",
         lambda v: True)
    goal("connect+disconnect/s, 100,000 live (N / (connect + disconnect totals))",
         [100_000 / ((phase(r, "connect")["total_ms"] + phase(r, "disconnect")["total_ms"]) / 1000)
          for r in m["live_100k"]], "{:,.0f}", ">= 100,000", lambda v: v >= 100_000)
    goal("connect+disconnect/s, 10,000 live (N / (connect + disconnect totals))",
         [10_000 / ((phase(r, "connect")["total_ms"] + phase(r, "disconnect")["total_ms"]) / 1000)
          for r in m["phased_10k"]], "{:,.0f}", ">= 100,000", lambda v: v >= 100_000)
    goal("DREQ->DREP median, sequential (us)",
         [phase(r, "disconnect")["p50_us"] for r in m["sequential"]], "{:.2f}", "<= 10",
         lambda v: v <= 10)
    goal("DREQ->DREP p99, sequential (us)",
         [phase(r, "disconnect")["p99_us"] for r in m["sequential"]], "{:.2f}", "(info)",
         lambda v: True)
    goal("DREQ->DREP median inside a cycle, from the handler (us)",
         [r["latency_us"]["dreq->drep"]["p50"] for r in m["cycles_w1"]], "{:.2f}", "(info)",
         lambda v: True)
    goal("RSS growth per cm_id, 100,000 live connections (bytes)",
         [r["memory"]["bytes_per_cm_id"] for r in m["live_100k"]], "{:,.0f}", "<= 1024",
         lambda v: v <= 1024)
    goal("RSS growth per connection (2 cm_ids), 100,000 live (bytes)",
         [r["memory"]["bytes_per_connection"] for r in m["live_100k"]], "{:,.0f}", "(info)",
         lambda v: True)
    goal("RSS growth per cm_id, 10,000 live connections (bytes)",
         [r["memory"]["bytes_per_cm_id"] for r in m["phased_10k"]], "{:,.0f}", "(info)",
         lambda v: True)
    goal("disconnect all 100,000 (DREQ..last DREP, ms)",
         [phase(r, "disconnect")["total_ms"] for r in m["live_100k"]], "{:,.1f}", "< 2000",
         lambda v: v < 2000)

    print(f"| measurement (median of {R}) | value | range | goal | |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    os.makedirs(os.path.join(ROOT, "build", "perf"), exist_ok=True)
    with open(os.path.join(ROOT, "build", "perf", "inprocess.json"), "w") as f:
        json.dump({"raw": m, "table": rows}, f, indent=1)


if __name__ == "__main__":
    main()
