#!/bin/sh
# softroce.switch: many processes on one host's ports through ibcmd (issue
# 12), inside the SoftRoCE VM. One ibcmd serves rxe0 and rxe1; 4 processes
# on rxe0 and 4 on rxe1 connect all-to-all (ibfabric_peer mesh: each rxe0
# process to each rxe1 process, 16 connections, and the pairs behind one
# device, 12 more) and disconnect, DREQ/DREP private data checked on each:
# once with the processes' direct sends (a send-only umad agent each), once
# with IBCM_SWITCH_DIRECT_SEND=0 (every MAD through the daemon).
# Exit 77 without rxe0/rxe1 or ibcmd.
#
#   switch_softroce.sh PEER LOGDIR
set -u
peer=$1 dir=$2/switch
for d in rxe0 rxe1; do
    [ -e /sys/class/infiniband/$d ] || { echo "SKIP: no $d"; exit 77; }
done
[ -x "${IBCMD:-}" ] || { echo "SKIP: no ibcmd (IBCMD)"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
IBCM_LOG=info "$IBCMD" --socket "$dir/ibcmd.sock" rxe0 rxe1 >ibcmd.log 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon' EXIT
i=0
until grep -q "listening on" ibcmd.log; do
    i=$((i + 1))
    [ $i -gt 300 ] && { echo "ibcmd did not start"; cat ibcmd.log; exit 1; }
    sleep 0.1
done
# mesh_round NAME [VAR=VALUE]: the mesh once, in $dir/NAME, with the
# environment VAR=VALUE added to each process.
mesh_round() {
    rdir=$dir/$1
    mkdir -p "$rdir"
    mesh=
    for n in 0 1 2 3 4 5 6 7; do
        dev=rxe0
        [ $n -ge 4 ] && dev=rxe1
        env ${2:-} IBCM_DEV_A=$dev IBCM_SWITCH_SOCKET=$dir/ibcmd.sock IBFABRIC_SERVICE=0x12380000 \
            IBFABRIC_ROCE=1 timeout 300 "$peer" mesh "$rdir" 8 $n 1 >"$rdir/mesh.$n.out" 2>&1 &
        mesh="$mesh $!"
    done
    # Every process has its paths (DIR/ready.N) before any REQ: then go.
    i=0
    while [ "$(ls "$rdir"/ready.* 2>/dev/null | wc -l)" -lt 8 ] && [ $i -lt 3000 ]; do
        i=$((i + 1))
        sleep 0.1
    done
    touch "$rdir/go"
    for p in $mesh; do wait "$p" || failed=1; done
    cat "$rdir"/mesh.*.out
}
stats() { stats=$("$IBCMD" --stats --socket "$dir/ibcmd.sock"); }
count() { echo "$stats" | sed -n "s/^$1 //p"; }
failed=0
# Processes that may open umad (root here) send what they may with a
# send-only agent of their own: the daemon carries each one's first MAD,
# its REPs and REJs, not its REQs, RTUs, DREQs and DREPs.
mesh_round direct
stats
echo "ibcmd after the first round:" $stats
direct_sent=$(count tx_sent)
# Then every MAD through the daemon's socket.
mesh_round socket IBCM_SWITCH_DIRECT_SEND=0
stats
echo "ibcmd after the second round:" $stats
socket_sent=$(($(count tx_sent) - direct_sent))
echo "MADs the daemon sent: $direct_sent with direct sends, $socket_sent without"
# 28 connections: 28 REQs, REPs, RTUs, DREQs and DREPs each through the
# socket; with direct sends the 28 REPs and a first MAD per process (36,
# retransmissions aside).
[ "$socket_sent" -ge 140 ] && [ $((direct_sent * 2)) -le "$socket_sent" ] || failed=1
[ "$(count registered)" = 16 ] || failed=1
[ "$(count tx_spoofed)" = 0 ] && [ "$(count rx_to_listener)" -ge 56 ] || failed=1
grep -E "error|registered" ibcmd.log | head -20
[ $failed = 0 ]
