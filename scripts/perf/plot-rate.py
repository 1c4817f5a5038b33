#!/usr/bin/env python3
"""Connection rate against live connections, on the in-process fabric.

Runs ibcm-cmtime (one-process mode, --json) with 1, 10, 100, 1k, 10k and 100k
connections (all established at once, so N is also the number of live
connections when the connect phase ends) and draws the connect and disconnect
rates (conn/s = N / phase total) against N into build/perf/rate.png; the raw
results go to build/perf/rate.json.

    scripts/perf/plot-rate.py [--repeat R] [--counts 1,10,...] [--out PNG]

Each count runs R times (default 3); the plot shows the median and the range.
matplotlib comes from PyPI; the script installs it with pip if it is missing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot-rate: installing matplotlib from PyPI", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"],
                       check=True)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def run(tool, lib, n):
    env = dict(os.environ, LD_LIBRARY_PATH=lib)
    p = subprocess.run([tool, "-c", str(n), "--json"], env=env, capture_output=True,
                       text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"plot-rate: ibcm-cmtime -c {n} failed ({p.returncode}):\n{p.stderr}")
    r = json.loads(p.stdout)
    return {ph["phase"]: ph for ph in r["phases"]} | {"memory": r.get("memory")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--counts", default="1,10,100,1000,10000,100000")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "perf", "rate.png"))
    ap.add_argument("--no-build", action="store_true", help="use build/c/ibcm-cmtime as it is")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]

    if not args.no_build:
        subprocess.run(["make", "-s", "-C", ROOT, "c-build"], check=True,
                       stdout=subprocess.DEVNULL)
    tool = os.path.join(ROOT, "build", "c", "ibcm-cmtime")
    lib = os.path.join(ROOT, "build", "stage", "lib")
    plt = ensure_matplotlib()

    results = {}
    for n in counts:
        runs = [run(tool, lib, n) for _ in range(args.repeat)]
        results[n] = runs
        conn = [r["connect"]["conn_per_sec"] for r in runs]
        disc = [r["disconnect"]["conn_per_sec"] for r in runs]
        print(f"{n:>7} live: connect {statistics.median(conn):>9.0f} conn/s "
              f"(p50 latency {statistics.median(r['connect']['p50_us'] for r in runs):.1f} us), "
              f"disconnect {statistics.median(disc):>9.0f} conn/s")

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(os.path.join(os.path.dirname(args.out), "rate.json"), "w") as f:
        json.dump({str(n): r for n, r in results.items()}, f, indent=1)

    fig, ax = plt.subplots(figsize=(8, 5))
    for phase, color in (("connect", "tab:blue"), ("disconnect", "tab:orange")):
        med = [statistics.median(r[phase]["conn_per_sec"] for r in results[n]) for n in counts]
        lo = [min(r[phase]["conn_per_sec"] for r in results[n]) for n in counts]
        hi = [max(r[phase]["conn_per_sec"] for r in results[n]) for n in counts]
        ax.plot(counts, med, "o-", color=color, label=f"{phase} (median of {args.repeat})")
        ax.fill_between(counts, lo, hi, color=color, alpha=0.2)
    ax.axhline(100_000, color="grey", linestyle="--", linewidth=1, label="100k conn/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("live connections (all N connected at once)")
    ax.set_ylabel("connections per second (N / phase total)")
    ax.set_title("libib_cm on the in-process fabric (ibcm-cmtime, loop0 <-> loop1, no QPs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot-rate: wrote {args.out}")


if __name__ == "__main__":
    main()
