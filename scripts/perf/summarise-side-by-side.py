#!/usr/bin/env python3
"""Summarises the raw outputs of side-by-side.sh and side-by-side-2vm.sh:
summarise-side-by-side.py DIR N ROUNDS [SETUP], SETUP describing the machines."""
import json
import os
import re
import statistics
import sys

out, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
setup = sys.argv[4] if len(sys.argv) > 4 else "QEMU TCG, 1 vCPU, rxe0 <-> rxe1 on a veth pair."
PHASES = ["create id", "connect", "disconnect", "destroy"]
med = statistics.median


def sections(path):
    """`=== name` sections of a VM's stdout."""
    secs, cur = {}, None
    for line in open(path):
        if line.startswith("=== "):
            cur = line[4:].strip()
            secs[cur] = ""
        elif cur:
            secs[cur] += line
    return secs


def cmtime_table(text):
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^(.{13}):\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", line)
        if m:
            rows[m.group(1).strip()] = {"total_ms": float(m.group(2)),
                                        "max_us": float(m.group(3)) * 1000,
                                        "min_us": float(m.group(4))}
    return rows


def client_json(text):
    dec, i = json.JSONDecoder(), 0
    while (i := text.find("{", i)) >= 0:
        obj, i = dec.raw_decode(text, i)
        if obj.get("mode") == "client":
            if obj["status"] != "ok":
                sys.exit(f"client status {obj['status']}")
            return {p["phase"]: p for p in obj["phases"]}
    sys.exit("no client JSON")


def cpu(text):
    m = re.search(r"cpu:([\d.]+):([\d.]+):(\d+):(\d+)", text)
    return {"user_s": float(m.group(1)), "sys_s": float(m.group(2)),
            "voluntary_cs": int(m.group(3)), "involuntary_cs": int(m.group(4))}


def vm_cpu(text):
    """Busy CPU time (s) of VM a and b between the two marks: /proc/stat's
    first line before and after, in USER_HZ (100) ticks, less idle and iowait."""
    marks = {"a": [], "b": []}
    for line in text.splitlines():
        f = line.split()
        if len(f) > 5 and f[0] in marks and f[1] == "cpu":
            t = [int(x) for x in f[2:]]
            marks[f[0]].append(sum(t) - t[3] - t[4])
    return {vm: (m[1] - m[0]) / 100 for vm, m in marks.items() if len(m) == 2}


runs = {"cmtime": [], "noqp": [], "ibcm": []}
vm_cpus = {"noqp": [], "ibcm": []}  # side-by-side-2vm.sh only
cpus = {"cmtime": [], "noqp": [], "ibcm": []}
srv_cpus = {"cmtime": [], "noqp": [], "ibcm": []}  # side-by-side-2vm.sh only
for r in range(1, rounds + 1):
    k = sections(f"{out}/kernel-{r}.txt")
    o = sections(f"{out}/ibcm-{r}.txt")
    runs["cmtime"].append(cmtime_table(k["cmtime.txt"]))
    runs["noqp"].append(client_json(k["noqp.json"]))
    runs["ibcm"].append(client_json(o["ibcm.json"]))
    cpus["cmtime"].append(cpu(k["cmtime.cpu"]))
    cpus["noqp"].append(cpu(k["noqp.cpu"]))
    cpus["ibcm"].append(cpu(o["ibcm.cpu"]))
    for t, secs in (("noqp", k), ("ibcm", o)):
        if f"{t}.vmcpu" in secs:
            vm_cpus[t].append(vm_cpu(secs[f"{t}.vmcpu"]))
    for t, secs in (("cmtime", k), ("noqp", k), ("ibcm", o)):
        if f"{t}.srvcpu" in secs:
            srv_cpus[t].append(cpu(secs[f"{t}.srvcpu"]))


def total(tool, ph):
    return [r[ph]["total_ms"] for r in runs[tool] if ph in r]


L, summary = [], {"connections": n, "rounds": rounds, "phases": {}}
L.append(f"{n} connections per run, {rounds} runs of each, medians of the per-run phase totals "
         "(conn/s = connections / total). " + setup)
L.append("")
L.append("| phase | kernel: cmtime v44 (QPs) | kernel: rdma_cm, no QPs | ibcm-cmtime | ratio ours / cmtime | ratio ours / no-QP rdma_cm |")
L.append("|---|---:|---:|---:|---:|---:|")
for ph in PHASES:
    k, q, o = med(total("cmtime", ph)), med(total("noqp", ph)), med(total("ibcm", ph))
    rate = lambda ms: n / (ms / 1000)
    summary["phases"][ph] = {t: {"total_ms": total(t, ph), "median_ms": med(total(t, ph)),
                                 "conn_per_sec": rate(med(total(t, ph)))}
                             for t in runs}
    summary["phases"][ph]["ratio_vs_cmtime"] = rate(o) / rate(k)
    summary["phases"][ph]["ratio_vs_noqp"] = rate(o) / rate(q)
    L.append(f"| {ph} | {k:.1f} ms = {rate(k):,.0f}/s | {q:.1f} ms = {rate(q):,.0f}/s | "
             f"{o:.1f} ms = {rate(o):,.0f}/s | {rate(o) / rate(k):.2f}x | {rate(o) / rate(q):.2f}x |")
L.append("")
L.append("Kernel-only steps (ibcm-cmtime has none of them), medians:")
for ph in ["bind addr", "resolve addr", "resolve route", "create qp"]:
    for t in ("cmtime", "noqp"):
        v = total(t, ph)
        if v:
            L.append(f"  {t:7s} {ph:14s} {med(v):9.1f} ms")
for side, per_tool in (("client", cpus), ("server", srv_cpus)):
    if not all(per_tool.values()):
        continue
    L.append("")
    L.append(f"{side.capitalize()} process CPU for the whole run (/usr/bin/time), medians:")
    summary[f"{side}_cpu"] = {}
    for t in runs:
        c = per_tool[t]
        u, s = med(x["user_s"] for x in c), med(x["sys_s"] for x in c)
        vcs, ics = med(x["voluntary_cs"] for x in c), med(x["involuntary_cs"] for x in c)
        summary[f"{side}_cpu"][t] = {"user_s": u, "sys_s": s, "voluntary_cs": vcs, "involuntary_cs": ics}
        L.append(f"  {t:7s} user {u:5.2f} s  sys {s:5.2f} s  = {(u + s) / n * 1e6:6.0f} us CPU per connection; "
                 f"context switches {vcs:.0f} voluntary, {ics:.0f} involuntary")
if all(len(v) == rounds and all(len(x) == 2 for x in v) for v in vm_cpus.values()):
    L.append("")
    L.append("Whole-VM CPU while the client ran (/proc/stat: both processes, kernel threads, "
             "softirqs), medians:")
    summary["vm_cpu"] = {}
    for t in vm_cpus:
        a, b = med(x["a"] for x in vm_cpus[t]), med(x["b"] for x in vm_cpus[t])
        summary["vm_cpu"][t] = {"client_vm_s": a, "server_vm_s": b}
        L.append(f"  {t:7s} client VM {a:5.2f} s = {a / n * 1e6:5.0f} us per connection, "
                 f"server VM {b:5.2f} s = {b / n * 1e6:5.0f} us per connection")
L.append("")
L.append("Per-run totals (ms):")
for ph in PHASES:
    L.append(f"  {ph:11s} " + " | ".join(f"{t} " + " ".join(f"{v:.0f}" for v in total(t, ph)) for t in runs))

# side-by-side-2vm.sh: tools/umad-floor.c in the boots of ibcm-cmtime, in
# three modes: one thread ("floor"), a reader handing bursts to a worker
# ("floort", --threads) and a worker reading the port ("floorw",
# --worker-reads). An output directory from before a mode existed has none.
def floor_runs(name, threads):
    """The rounds' runs of one floor mode, or None if a round lacks one."""
    f = {"runs": [], "cpu": [], "srv": [], "vm": [], "resent": [], "late": []}
    for r in range(1, rounds + 1):
        o = sections(f"{out}/ibcm-{r}.txt")
        if any(f"{name}.{k}" not in o for k in ("json", "cpu", "srvcpu", "vmcpu")):
            return None
        text = o[f"{name}.json"]
        if "{" not in text:
            sys.exit(f"{name} round {r}: no client JSON")
        obj = json.JSONDecoder().raw_decode(text, text.find("{"))[0]
        if "threads" not in obj or obj.get("threads") is False:
            return None  # from before --threads, or the first --threads (a bool)
        if obj.get("status") != "ok" or obj.get("threads") != threads:
            sys.exit(f"{name} round {r}: status {obj.get('status')}, threads {obj.get('threads')}")
        vm = vm_cpu(o[f"{name}.vmcpu"])
        if set(vm) != {"a", "b"}:
            sys.exit(f"{name} round {r}: a VM CPU mark is missing")
        f["runs"].append({p["phase"]: p for p in obj["phases"]})
        f["resent"].append(sum(p.get("resent", 0) for p in obj["phases"]))
        f["late"].append(sum(p.get("late", 0) for p in obj["phases"]))
        f["cpu"].append(cpu(o[f"{name}.cpu"]))
        f["srv"].append(cpu(o[f"{name}.srvcpu"]))
        f["vm"].append(vm)
    return f


floors = {k: f for k, f in (("floor", floor_runs("floor", "one")),
                            ("floor_threads", floor_runs("floort", "reader+worker")),
                            ("floor_worker_reads", floor_runs("floorw", "worker-reads"))) if f}
FLOOR_NAMES = {"floor": "umad floor, one thread", "floor_threads": "floor, reader + worker",
               "floor_worker_reads": "floor, worker reads"}
if "floor" in floors:
    rate = lambda ms: n / (ms / 1000)
    both = ("connect", "disconnect")
    fmed = {k: {ph: med(x[ph]["total_ms"] for x in f["runs"]) for ph in both} for k, f in floors.items()}
    q = {ph: med(total("noqp", ph)) for ph in both}
    o = {ph: med(total("ibcm", ph)) for ph in both}
    # The same per-connection CPU as the sections above: median user + median sys.
    per_conn = lambda c: (med(x["user_s"] for x in c) + med(x["sys_s"] for x in c)) / n * 1e6
    L.append("")
    L.append("The umad floor (tools/umad-floor.c: the five MADs of each connection over umad and no "
             "CM; in the boots of ibcm-cmtime, the order reversed every other round): one thread; "
             "a reader handing each burst to a worker while the main thread waits (--threads, a CM "
             "library's threads); one thread reading and answering while the main thread waits "
             "(--worker-reads). Medians:")
    L.append("")
    L.append("| | connect | disconnect | connect / no-QP | disconnect / no-QP | ours / this, connect | "
             "ours / this, disconnect | client process | server process | client VM | server VM |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = [("rdma_cm, no QPs", q, cpus["noqp"], srv_cpus["noqp"], vm_cpus["noqp"])]
    rows += [(FLOOR_NAMES[k], fmed[k], f["cpu"], f["srv"], f["vm"]) for k, f in floors.items()]
    rows += [("ibcm-cmtime", o, cpus["ibcm"], srv_cpus["ibcm"], vm_cpus["ibcm"])]
    for name, t, c, sc, vm in rows:
        vms = [med(x[v] for x in vm) / n * 1e6 if vm and all(v in x for x in vm) else float("nan")
               for v in ("a", "b")]
        L.append(f"| {name} | {rate(t['connect']):,.0f}/s | {rate(t['disconnect']):,.0f}/s | "
                 f"{rate(t['connect']) / rate(q['connect']):.2f}x | "
                 f"{rate(t['disconnect']) / rate(q['disconnect']):.2f}x | "
                 f"{rate(o['connect']) / rate(t['connect']):.2f}x | "
                 f"{rate(o['disconnect']) / rate(t['disconnect']):.2f}x | "
                 f"{per_conn(c) if c else float('nan'):,.0f} µs | {per_conn(sc) if sc else float('nan'):,.0f} µs | "
                 f"{vms[0]:,.0f} µs | {vms[1]:,.0f} µs |")
    L.append("")
    L.append("(CPU per connection; process: /usr/bin/time of the tool, start-up included; VM: all of "
             "the VM's busy CPU while the client ran.)")
    for k, fl in floors.items():
        fc, fs = per_conn(fl["cpu"]), per_conn(fl["srv"])
        fa, fb = (med(x[v] for x in fl["vm"]) / n * 1e6 for v in ("a", "b"))
        summary[k] = {
            "phases": {ph: {"total_ms": [x[ph]["total_ms"] for x in fl["runs"]],
                            "median_ms": fmed[k][ph], "conn_per_sec": rate(fmed[k][ph]),
                            "ratio_vs_noqp": rate(fmed[k][ph]) / rate(q[ph]),
                            "ratio_ours_vs_this": rate(o[ph]) / rate(fmed[k][ph]),
                            "ratio_vs_floor": rate(fmed[k][ph]) / rate(fmed["floor"][ph])}
                       for ph in both},
            "cpu_us_per_conn": {"client": fc, "server": fs, "client_vm": fa, "server_vm": fb},
            "resent": fl["resent"], "late": fl["late"],
        }
        L.append(f"  {k} per-run totals (ms): " + " | ".join(
            f"{ph} " + " ".join(f"{x[ph]['total_ms']:.0f}" for x in fl["runs"]) for ph in both)
            + "; resent " + " ".join(map(str, fl["resent"])) + ", late " + " ".join(map(str, fl["late"])))
        if any(fl["resent"]):
            L.append(f"  WARNING: {k} resent requests in some rounds: those totals include a 1 s wait, "
                     "no floor")
# IBCM_LIB_B: a second library in the same boots as ours ("ibcmb"): per
# round, its rate over ours in that boot, and the medians of those ratios.
paired = []
for r in range(1, rounds + 1):
    o = sections(f"{out}/ibcm-{r}.txt")
    if "ibcmb.json" not in o:
        break
    paired.append({"a": client_json(o["ibcm.json"]), "b": client_json(o["ibcmb.json"]),
                   "a_cpu": cpu(o["ibcm.cpu"]), "b_cpu": cpu(o["ibcmb.cpu"]),
                   "a_srv": cpu(o["ibcm.srvcpu"]), "b_srv": cpu(o["ibcmb.srvcpu"]),
                   "a_vm": vm_cpu(o["ibcm.vmcpu"]), "b_vm": vm_cpu(o["ibcmb.vmcpu"])})
if len(paired) == rounds:
    b_commit = open(f"{out}/lib-b/commit").read().strip() if os.path.exists(f"{out}/lib-b/commit") else "?"
    L.append("")
    L.append(f"Library B ({b_commit}) in the same boots as this tree's (A), the order reversed every "
             "other round; per round B's rate / A's, then the median of the rounds' ratios:")
    summary["lib_b"] = {"commit": b_commit, "phases": {}}
    for ph in ("connect", "disconnect"):
        ratios = [x["a"][ph]["total_ms"] / x["b"][ph]["total_ms"] for x in paired]
        a_rate = med(n / (x["a"][ph]["total_ms"] / 1000) for x in paired)
        b_rate = med(n / (x["b"][ph]["total_ms"] / 1000) for x in paired)
        summary["lib_b"]["phases"][ph] = {"ratios_b_over_a": ratios, "median_ratio": med(ratios),
                                          "a_conn_per_sec": a_rate, "b_conn_per_sec": b_rate}
        L.append(f"  {ph:10s} A {a_rate:,.0f}/s, B {b_rate:,.0f}/s; B / A per round "
                 + " ".join(f"{v:.2f}" for v in ratios) + f"; median {med(ratios):.2f}x")
    for side, key in (("client process", "cpu"), ("server process", "srv")):
        a = med((x[f"a_{key}"]["user_s"] + x[f"a_{key}"]["sys_s"]) / n * 1e6 for x in paired)
        b = med((x[f"b_{key}"]["user_s"] + x[f"b_{key}"]["sys_s"]) / n * 1e6 for x in paired)
        va = med(x[f"a_{key}"]["voluntary_cs"] for x in paired)
        vb = med(x[f"b_{key}"]["voluntary_cs"] for x in paired)
        L.append(f"  {side}: CPU per connection A {a:,.0f} us, B {b:,.0f} us; voluntary context "
                 f"switches A {va:,.0f}, B {vb:,.0f}")
    for vm, name in (("a", "client VM"), ("b", "server VM")):
        a = med(x["a_vm"][vm] for x in paired) / n * 1e6
        b = med(x["b_vm"][vm] for x in paired) / n * 1e6
        L.append(f"  {name}: CPU per connection A {a:,.0f} us, B {b:,.0f} us")
text = "\n".join(L)
print(text)
open(f"{out}/summary.md", "w").write(text + "\n")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
