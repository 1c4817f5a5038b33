#!/usr/bin/env bash
# side-by-side-2vm.sh [-c CONNECTIONS] [-r ROUNDS]
# IBCM_LIB_B=DIR side-by-side-2vm.sh ...: DIR's libib_cm.so.0 runs too, in
# the same boots as this tree's (a paired comparison of two builds)
# IBCM_ENV_B='K=V ...' side-by-side-2vm.sh ...: the same, B with those
# variables set (and this tree's library, unless IBCM_LIB_B says otherwise)
#
# libib_cm next to the kernel CM between two hosts: two QEMU VMs, one vCPU
# each, joined by one virtual Ethernet link (softroce/run-2vm.sh), rxe0 on each
# NIC. The client runs in VM A (10.78.0.1), the server in VM B (10.78.0.2),
# started and stopped through the interop agent (interop/agent.py).
#
#   kernel  both VMs with the kernel CM (ib_cm, rdma_cm, rdma_ucm):
#           1. rdma-core's cmtime (rdma-core 44: creates and modifies a QP per
#              connection on both sides)
#              B: cmtime -b 10.78.0.2 -c N    A: cmtime -s 10.78.0.2 -b 10.78.0.1 -c N
#           2. tools/rdmacm-cmtime-noqp.c: the same rdma_cm calls without QPs
#   ibcm    neither VM with the kernel CM:
#              B: ibcm-cmtime --server -D rxe0
#              A: ibcm-cmtime --client ::ffff:10.78.0.2 -d rxe0 -c N --no-warmup
#           then, in the same boot, tools/umad-floor.c: the same five MADs per
#           connection over umad with no CM at all (one write per MAD sent,
#           one read per MAD received): what any CM on umad pays at least
#              B: umad-floor --server -d rxe0
#              A: umad-floor --client ::ffff:10.78.0.2 -d rxe0 -c N
#           and again with --threads on both sides: a reader thread, a worker
#           thread and the client's main thread, the hand-offs of a CM
#           library's threads with no CM in them; and with --worker-reads:
#           one thread reads and answers, the client's main thread waits
#
# ROUNDS rounds (default 3) of each, alternating, N connections (default
# 1000). Each client and each server runs under /usr/bin/time. Prints per-phase medians and
# the ratios ours / kernel; raw outputs and the summary go to
# build/perf/side-by-side-2vm/. The one-VM variant (client and server sharing
# one vCPU) is side-by-side.sh.
USAGE=2,33 OUT_NAME=side-by-side-2vm
. "$(dirname "$0")/side-by-side-prepare.sh" "$@"

# Shell functions for VM A's command: the agent in B, and waiting for B's
# kernel listener (rdma res) or ibcm-cmtime server (its log).
PRELUDE="set -u
bctl() { python3 $ROOT/interop/bctl.py \"\$@\"; }
TIME='/usr/bin/time -f cpu:%U:%S:%w:%c -o'
bctl ping 60 > /dev/null
listening() { bctl run \"for _ in \\\$(seq 1 200); do rdma res show cm_id | grep LISTEN | grep -q ':\$1 ' && exit 0; sleep 0.05; done; exit 1\" > /dev/null; }
finish() { for f in \"\$@\"; do echo \"=== \$f\"; cat \$SRT_JOB/\$f; done; bctl quit > /dev/null; }
# Both VMs' CPU lines of /proc/stat before and after a client run: what each
# whole VM spent meanwhile, kernel threads and softirqs included. B's mark
# goes through bctl (a python3 start in A), so it is taken outside A's
# interval: B then A before the run, A then B after it.
vmcpu_b() { bctl run 'head -1 /proc/stat' | sed -n 's/^B| /b /p' >> \$SRT_JOB/\$1.vmcpu; }
vmcpu_a() { echo \"a \$(head -1 /proc/stat)\" >> \$SRT_JOB/\$1.vmcpu; }
vmcpu_before() { vmcpu_b \$1; vmcpu_a \$1; }
vmcpu_after() { vmcpu_a \$1; vmcpu_b \$1; }"
KERNEL_CMD="$PRELUDE
bctl start srv '/usr/bin/time -f cpu:%U:%S:%w:%c -o /tmp/srv.cpu cmtime -b \$SRT_SELF_IP -c $N'
listening 7471
\$TIME \$SRT_JOB/cmtime.cpu cmtime -s \$SRT_PEER_IP -b \$SRT_SELF_IP -c $N > \$SRT_JOB/cmtime.txt; rc=\$?
bctl run 'pkill -x cmtime'; bctl wait srv > /dev/null
bctl run 'cat /tmp/srv.cpu' > \$SRT_JOB/cmtime.srvcpu
bctl start srv '/usr/bin/time -f cpu:%U:%S:%w:%c -o /tmp/srv.cpu $OUT/bin/rdmacm-cmtime-noqp -b \$SRT_SELF_IP'
listening 7472
vmcpu_before noqp
\$TIME \$SRT_JOB/noqp.cpu $OUT/bin/rdmacm-cmtime-noqp -s \$SRT_PEER_IP -b \$SRT_SELF_IP -c $N --json > \$SRT_JOB/noqp.json 2>/dev/null || rc=1
vmcpu_after noqp
bctl run 'pkill -x rdmacm-cmtime-n'; bctl wait srv > /dev/null
bctl run 'cat /tmp/srv.cpu' > \$SRT_JOB/noqp.srvcpu
finish cmtime.txt cmtime.cpu cmtime.srvcpu noqp.json noqp.cpu noqp.srvcpu noqp.vmcpu
exit \$rc"
# In VM A, with @ROUND@ replaced by the round's number: an unmeasured
# warm-up (100 connections of the floor: the first run in a boot pays TCG's
# translation of the kernel's umad and rxe paths, as the kernel rounds'
# cmtime does for the no-QP tool), then ibcm-cmtime and the floor in its
# three modes, in odd rounds, and the other way round in even ones.
IBCM_CMD="$PRELUDE
rc=0
up() { bctl run 'for _ in \$(seq 1 300); do grep -q \"server: listening\" /tmp/agent-srv.log && exit 0; sleep 0.1; done; exit 1' > /dev/null || rc=1; }
# pair NAME 'SERVER' 'CLIENT' PROG: SERVER started in B (PROG its process
# name, killed if it does not end), then CLIENT run in A under time, both
# VMs' CPU marked around it; the outputs NAME.json, .cpu, .srvcpu, .vmcpu.
pair() {
  bctl start srv \"rm -f /tmp/srv.cpu; /usr/bin/time -f cpu:%U:%S:%w:%c -o /tmp/srv.cpu \$2\" > /dev/null || rc=1
  up
  vmcpu_before \$1
  \$TIME \$SRT_JOB/\$1.cpu \$3 > \$SRT_JOB/\$1.json || rc=1
  vmcpu_after \$1
  # A server left over would answer the next run's client.
  bctl wait -t 120 srv > /dev/null || { rc=1; bctl run \"pkill -x \$4; sleep 1\" > /dev/null; }
  bctl run 'cat /tmp/srv.cpu' > \$SRT_JOB/\$1.srvcpu
}
# ours NAME LIB [K=V...]: one ibcm-cmtime run on the library in LIB
ours() {
  pair \$1 \"env LD_LIBRARY_PATH=\$2 \${3:-} $OUT/bin/ibcm-cmtime --server -D rxe0\" \\
    \"env LD_LIBRARY_PATH=\$2 \${3:-} $OUT/bin/ibcm-cmtime --client ::ffff:\$SRT_PEER_IP -d rxe0 -c $N --json --no-warmup\" ibcm-cmtime
}
# IBCM_LIB_B: the second library, after ours in odd rounds, before it in even.
oursb() { [ -d $OUT/lib-b ] && ours ibcmb $OUT/lib-b '${IBCM_ENV_B:-}'; }
# floor NAME [--threads | --worker-reads] [-c N]: one umad-floor run
floor() {
  pair \$1 \"$OUT/bin/umad-floor --server -d rxe0 \${2:-}\" \\
    \"$OUT/bin/umad-floor --client ::ffff:\$SRT_PEER_IP -d rxe0 -c $N --json \${2:-} \${3:-} \${4:-}\" umad-floor
}
floor warmup '' -c 100
if [ \$((@ROUND@ % 2)) = 1 ]; then
  ours ibcm $OUT/lib; oursb; floor floor; floor floort --threads; floor floorw --worker-reads
else
  floor floorw --worker-reads; floor floort --threads; floor floor; oursb; ours ibcm $OUT/lib
fi
[ -d $OUT/lib-b ] && finish_b='ibcmb.json ibcmb.cpu ibcmb.srvcpu ibcmb.vmcpu' || finish_b=
finish \$finish_b ibcm.json ibcm.cpu ibcm.srvcpu ibcm.vmcpu floor.json floor.cpu floor.srvcpu floor.vmcpu floort.json floort.cpu floort.srvcpu floort.vmcpu floorw.json floorw.cpu floorw.srvcpu floorw.vmcpu
exit \$rc"
B_CMD="exec python3 $ROOT/interop/agent.py"

# A's output without run-2vm's "[A] " prefix, B's dropped.
a_only() { sed -n 's/^\[A\] //p'; }
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS: kernel CM, two VMs (cmtime, then rdmacm-cmtime-noqp; $N connections)" >&2
  softroce/run-2vm.sh --a-ibcm --b-ibcm --timeout 900 "$KERNEL_CMD" "$B_CMD" 2> "$OUT/kernel-$r.err" |
    a_only > "$OUT/kernel-$r.txt" ||
    { echo "kernel round $r failed:" >&2; cat "$OUT/kernel-$r.txt" "$OUT/kernel-$r.err" >&2; exit 1; }
  echo "round $r/$ROUNDS: ib_cm, two VMs (ibcm-cmtime client/server; $N connections)" >&2
  softroce/run-2vm.sh --timeout 900 "${IBCM_CMD//@ROUND@/$r}" "$B_CMD" 2> "$OUT/ibcm-$r.err" |
    a_only > "$OUT/ibcm-$r.txt" ||
    { echo "ibcm round $r failed:" >&2; cat "$OUT/ibcm-$r.txt" "$OUT/ibcm-$r.err" >&2; exit 1; }
done

python3 "$ROOT/scripts/perf/summarise-side-by-side.py" "$OUT" "$N" "$ROUNDS" \
  "Two QEMU TCG VMs, 1 vCPU each, client in A, server in B, rxe0 on each NIC, one virtual link."
