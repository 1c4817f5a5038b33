#!/usr/bin/env bash
# ibcmd-2vm.sh [-c CONNECTIONS] [-r ROUNDS]
#
# The rate with and without ibcmd (docs/ibcmd.md) between two hosts: two QEMU
# VMs, one vCPU each, rxe0 on each NIC (softroce/run-2vm.sh), neither with
# the kernel CM. ibcm-cmtime --server in B, --client in A, ROUNDS rounds
# (default 3) of N connections (default 1000), alternating:
#   direct  both processes open rxe0 through umad
#   ibcmd   an ibcmd serves rxe0 in each VM; both processes go through it,
#           and send what they may straight to umad (a send-only agent)
#   ibcmd-socket  the same with IBCM_SWITCH_DIRECT_SEND=0: every MAD sent
#           crosses the daemon's socket too
# and, in the same rounds, the umad floor (tools/umad-floor.c, no CM) both
# ways, the floor of each ratio:
#   floor-direct  --worker-reads: one thread reads the port and answers (the
#           library's shape on umad)
#   floor-relay   --relay --worker-reads: a relay process owns the CM agent
#           and hands each MAD on over a socket, as ibcmd does; the reading
#           thread answers, sending with a send-only agent: the least any
#           MAD switch costs
#   floor-relay-threads  --relay --threads: the same with a reader thread
#           handing each burst to a worker (the library's shape behind ibcmd)
# The order of the six is reversed every other round.
# Prints each run's connect and disconnect rates and the median ratio;
# raw outputs go to build/perf/ibcmd-2vm/.
USAGE=2,25 OUT_NAME=ibcmd-2vm
. "$(dirname "$0")/side-by-side-prepare.sh" "$@"
cp build/stage/sbin/ibcmd "$OUT/bin/ibcmd"

A_CMD="set -u
bctl() { python3 $ROOT/interop/bctl.py \"\$@\"; }
bctl ping 60 > /dev/null
export LD_LIBRARY_PATH=$OUT/lib
SOCK=/tmp/ibcmd.sock
rc=0
listening() { bctl run 'for _ in \$(seq 1 300); do grep -q \"server: listening\" /tmp/agent-srv.log && exit 0; sleep 0.1; done; exit 1' > /dev/null; }
b_stat() { bctl run 'head -1 /proc/stat' | sed -n 's/^B| //p'; }
# timed FILE COMMAND...: COMMAND's output to FILE, then a line with the time
# and both VMs' /proc/stat CPU lines before and after it
timed() {
  f=\$1; shift
  a0=\$(head -1 /proc/stat); b0=\$(b_stat); t0=\$(date +%s.%N)
  \"\$@\" > \$f 2>&1 || rc=1
  t1=\$(date +%s.%N); a1=\$(head -1 /proc/stat); b1=\$(b_stat)
  echo \"vm: \$t0 \$t1 | \$a0 | \$a1 | \$b0 | \$b1\" >> \$f
}
run() { # run MODE ROUND
  if [ \$1 != direct ]; then
    bctl start d 'exec $OUT/bin/ibcmd --socket /tmp/ibcmd.sock rxe0'
    $OUT/bin/ibcmd --socket \$SOCK rxe0 > \$SRT_JOB/ibcmd.log 2>&1 &
    D=\$!
    sleep 1
    env=\"IBCM_SWITCH_SOCKET=/tmp/ibcmd.sock\"
    [ \$1 = ibcmd-socket ] && env=\"\$env IBCM_SWITCH_DIRECT_SEND=0\"
  else
    env=\"IBCM_SWITCH_SOCKET=/nonexistent.sock\"
  fi
  bctl start srv \"env \$env LD_LIBRARY_PATH=$OUT/lib $OUT/bin/ibcm-cmtime --server -D rxe0\"
  listening
  timed \$SRT_JOB/\$1-\$2.txt env \$env $OUT/bin/ibcm-cmtime --client ::ffff:\$SRT_PEER_IP -d rxe0 -c $N --no-warmup
  bctl wait -t 120 srv > /dev/null || rc=1
  if [ \$1 != direct ]; then
    $OUT/bin/ibcmd --stats --socket \$SOCK | tr '\\n' ' ' >> \$SRT_JOB/\$1-\$2.txt
    echo >> \$SRT_JOB/\$1-\$2.txt
    bctl run '$OUT/bin/ibcmd --stats --socket /tmp/ibcmd.sock' | sed -n 's/^B| //p' | tr '\\n' ' ' >> \$SRT_JOB/\$1-\$2.txt
    kill \$D; wait \$D
    bctl run 'pkill -x ibcmd' > /dev/null; bctl wait d > /dev/null
  fi
  echo \"=== \$1 round \$2\"; grep -E '^(connect|disconnect) |tx_sent|rror|^vm: ' \$SRT_JOB/\$1-\$2.txt
}
floor() { # floor MODE ROUND OPTIONS...: one umad-floor run, server in B
  m=\$1 r=\$2; shift 2
  bctl start srv \"$OUT/bin/umad-floor --server -d rxe0 \$*\"
  listening
  timed \$SRT_JOB/\$m-\$r.txt $OUT/bin/umad-floor --client ::ffff:\$SRT_PEER_IP -d rxe0 -c $N \$*
  bctl wait -t 120 srv > /dev/null || rc=1
  echo \"=== \$m round \$r\"; grep -E 'connections: connect|rror|^vm: ' \$SRT_JOB/\$m-\$r.txt
}
floor warmup 0 --worker-reads
for r in \$(seq 1 $ROUNDS); do
  if [ \$((r % 2)) = 1 ]; then
    run direct \$r; run ibcmd \$r; run ibcmd-socket \$r
    floor floor-direct \$r --worker-reads; floor floor-relay \$r --relay --worker-reads
    floor floor-relay-threads \$r --relay --threads
  else
    floor floor-relay-threads \$r --relay --threads; floor floor-relay \$r --relay --worker-reads
    floor floor-direct \$r --worker-reads
    run ibcmd-socket \$r; run ibcmd \$r; run direct \$r
  fi
done
bctl quit > /dev/null
exit \$rc"
B_CMD="exec python3 $ROOT/interop/agent.py"
softroce/run-2vm.sh --timeout 1500 "$A_CMD" "$B_CMD" 2> "$OUT/run.err" | sed -n 's/^\[A\] //p' | tee "$OUT/a.txt"
python3 - "$OUT/a.txt" <<'PY'
import re, statistics, sys
rates = {}
mode = None
for line in open(sys.argv[1]):
    m = re.match(r"=== (\S+) round", line)
    if m:
        mode = m.group(1)
    m = re.match(r"(connect|disconnect)\s+\S+\s+(\d+)", line)
    if m and mode:
        rates.setdefault((mode, m.group(1)), []).append(int(m.group(2)))
    # umad-floor: "N connections: connect T ms = R/s, disconnect T ms = R/s; ..."
    m = re.search(r"connections: connect \S+ ms = (\d+)/s, disconnect \S+ ms = (\d+)/s", line)
    if m and mode and mode != "warmup":
        rates.setdefault((mode, "connect"), []).append(int(m.group(1)))
        rates.setdefault((mode, "disconnect"), []).append(int(m.group(2)))
busy = {}
mode = None
for line in open(sys.argv[1]):
    m = re.match(r"=== (\S+) round", line)
    if m:
        mode = m.group(1)
    if line.startswith("vm: ") and mode:
        f = line[4:].split("|")
        t0, t1 = (float(x) for x in f[0].split())
        def ticks(stat):
            t = [int(x) for x in stat.split()[1:]]
            return sum(t) - t[3] - t[4]
        a = (ticks(f[2]) - ticks(f[1])) / 100
        b = (ticks(f[4]) - ticks(f[3])) / 100
        busy.setdefault(mode, []).append((a / (t1 - t0), b / (t1 - t0)))
for mode, v in busy.items():
    if mode == "warmup":
        continue
    print(f"{mode}: each VM's CPU busy while the client ran (median): client VM "
          f"{100 * statistics.median(x[0] for x in v):.0f} %, server VM "
          f"{100 * statistics.median(x[1] for x in v):.0f} %")
def ratio(base, mode, phase):
    d, s = rates.get((base, phase), []), rates.get((mode, phase), [])
    if d and s:
        per_round = " ".join(f"{100 * b / a:.0f}" for a, b in zip(d, s))
        print(f"{phase}: {base} {d} conn/s (median {statistics.median(d)}), {mode} {s} "
              f"(median {statistics.median(s)}): {100 * statistics.median(s) / statistics.median(d):.0f} % "
              f"(per round: {per_round} %)")
for phase in ("connect", "disconnect"):
    for mode in ("ibcmd", "ibcmd-socket"):
        ratio("direct", mode, phase)
    for mode in ("floor-relay", "floor-relay-threads"):
        ratio("floor-direct", mode, phase)
    ratio("floor-direct", "direct", phase)
    # An estimate of the most ibcm through any switch could reach in each
    # round: its direct time per connection plus the least a hop adds (the
    # relay floor's time over the direct floor's), assuming the hop costs
    # ibcm what it costs the floor.
    d, f, r = (rates.get((m, phase), []) for m in ("direct", "floor-direct", "floor-relay"))
    bounds = [100 / (1 + max(1 / c - 1 / a, 0) * b) for b, a, c in zip(d, f, r)]
    if bounds:
        print(f"{phase}: the most a switch leaves ibcm (estimate), per round (direct / (direct + relay "
              f"floor - floor)): {' '.join(f'{x:.0f}' for x in bounds)} % "
              f"(median {statistics.median(bounds):.0f} %)")
PY
