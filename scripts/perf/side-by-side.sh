#!/usr/bin/env bash
# side-by-side.sh [-c CONNECTIONS] [-r ROUNDS]
#
# libib_cm next to the kernel CM on the same SoftRoCE link: rxe0 (10.77.0.1)
# <-> rxe1 (10.77.0.2) on a veth pair inside one QEMU VM (softroce/).
#
#   kernel  in a VM booted with --ibcm (ib_cm, rdma_cm, rdma_ucm loaded):
#           1. rdma-core's cmtime (Debian 12: rdma-core 44, rdmacm-utils):
#                server: cmtime -b 10.77.0.2 -c N
#                client: cmtime -s 10.77.0.2 -b 10.77.0.1 -c N
#              creates and modifies a QP per connection (both sides)
#           2. tools/rdmacm-cmtime-noqp.c: the same rdma_cm calls without
#              QPs (made-up QPNs), the kernel CM's own cost
#   ibcm    ibcm-cmtime --server -D rxe1 / --client ::ffff:10.77.0.2 -d rxe0
#           -c N --no-warmup (cmtime v44 has no warm-up either) in a VM
#           booted without the kernel CM (tools/client-server.sh)
#
# ROUNDS rounds (default 3), each one VM of each kind, alternating, N
# connections (default 1000) per run. Each client runs under /usr/bin/time
# (CPU seconds, context switches). Prints per-phase medians and the ratios
# ours / kernel of the rates; raw outputs and the summary (summary.md,
# summary.json) go to build/perf/side-by-side/.
#
# Everything runs under QEMU TCG (no KVM here) on one vCPU: absolute numbers
# are slow, only ratios measured in the same conditions mean anything. What
# is and is not like-for-like: docs/performance.md, "Side by side with the kernel CM".
USAGE=2,26 OUT_NAME=side-by-side
. "$(dirname "$0")/side-by-side-prepare.sh" "$@"

TIME='/usr/bin/time -f cpu:%U:%S:%w:%c -o'
# A kernel server must be listening before its client starts: wait for its
# listener in `rdma res show cm_id`. cmtime v44's server never exits: kill it.
listening() { echo "for _ in \$(seq 1 100); do rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q ':$1 ' && break; sleep 0.1; done"; }
KERNEL_CMD="set -u
cmtime -b 10.77.0.2 -c $N > /dev/null 2>&1 & srv=\$!
$(listening 7471)
$TIME \$SRT_JOB/cmtime.cpu cmtime -s 10.77.0.2 -b 10.77.0.1 -c $N > \$SRT_JOB/cmtime.txt; rc=\$?
kill \$srv; wait \$srv 2>/dev/null
$OUT/bin/rdmacm-cmtime-noqp -b 10.77.0.2 > /dev/null 2>&1 & srv=\$!
$(listening 7472)
$TIME \$SRT_JOB/noqp.cpu $OUT/bin/rdmacm-cmtime-noqp -s 10.77.0.2 -b 10.77.0.1 -c $N --json > \$SRT_JOB/noqp.json 2>/dev/null || rc=1
kill \$srv; wait \$srv 2>/dev/null
for f in cmtime.txt cmtime.cpu noqp.json noqp.cpu; do echo \"=== \$f\"; cat \$SRT_JOB/\$f; done
exit \$rc"
IBCM_CMD="set -u
IBCM_CLIENT_WRAP=\"$TIME \$SRT_JOB/ibcm.cpu\" LD_LIBRARY_PATH=$OUT/lib tools/client-server.sh $OUT/bin/ibcm-cmtime $N --json --no-warmup > \$SRT_JOB/ibcm.json; rc=\$?
for f in ibcm.json ibcm.cpu; do echo \"=== \$f\"; cat \$SRT_JOB/\$f; done
exit \$rc"

for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS: kernel CM (cmtime, then rdmacm-cmtime-noqp; $N connections)" >&2
  softroce/run-in-vm.sh --ibcm --timeout 900 -- "$KERNEL_CMD" > "$OUT/kernel-$r.txt" 2> "$OUT/kernel-$r.err" ||
    { echo "kernel round $r failed:" >&2; cat "$OUT/kernel-$r.txt" "$OUT/kernel-$r.err" >&2; exit 1; }
  echo "round $r/$ROUNDS: ib_cm (ibcm-cmtime client/server; $N connections)" >&2
  softroce/run-in-vm.sh --timeout 900 -- "$IBCM_CMD" > "$OUT/ibcm-$r.txt" 2> "$OUT/ibcm-$r.err" ||
    { echo "ibcm round $r failed:" >&2; cat "$OUT/ibcm-$r.txt" "$OUT/ibcm-$r.err" >&2; exit 1; }
done

python3 "$ROOT/scripts/perf/summarise-side-by-side.py" "$OUT" "$N" "$ROUNDS"
