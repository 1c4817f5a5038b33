# Sourced by every scenario of the two-VM interoperability suite (VM A side).
# $1 of the scenario: the ibcm-interop program. Exits 77 (skipped) outside the
# two-VM harness (interop/run.sh). A scenario whose program runs hooks
# ($IBCM_HOOK_<NAME>) points them back at itself: `bash SCENARIO PROGRAM hook
# NAME` runs the function hook_<name> of the scenario, without a new capture.
set -uo pipefail
if [ "${SRT_ROLE:-}" != a ] || [ -z "${SRT_PEER_IP:-}" ]; then
  echo "interop: runs only in VM A of interop/run.sh, skipped"
  exit 77
fi
IBCM_INTEROP=$1
INTEROP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCENARIO=$(basename "$0" .sh)
OUT=${SRT_JOB:-/tmp}/interop
mkdir -p "$OUT"
export IBCM_DEV_A=rxe0
NIC=$(ls /sys/class/net | grep -vE '^(lo|veth.*)$' | head -1)
START_NS=$(date +%s%N)

bctl() { python3 "$INTEROP_DIR/bctl.py" "$@"; }
fail() { echo "FAIL $SCENARIO: $*"; exit 1; }
step() { printf '%s +%d ms: %s\n' "$SCENARIO" $((($(date +%s%N) - START_NS) / 1000000)) "$*"; }

# The kernel's CM counters of B's rxe0 port 1 (sysfs), e.g. kcounter cm_rx_msgs dreq.
kcounter() { bctl run "cat /sys/class/infiniband/rxe0/ports/1/$1/$2" | sed -n 's/^B| //p'; }

# Waits until B has a listening rdma_cm id on TCP/UDP port $1.
b_wait_listen() {
  bctl run "for _ in \$(seq 1 200); do rdma res show cm_id | grep LISTEN | grep -q ':$1 ' && exit 0; sleep 0.05; done; rdma res show cm_id; exit 1" \
    || fail "no kernel listener on port $1 in B"
}

# Drops the CM MADs (RoCE v2 packets to QP 1) that leave $where's NIC, and only
# those: data keeps flowing. u32 offsets count from the IP header: UDP
# destination port at 22, BTH destination QP in the low 24 bits at 32.
QP1_DROP="modprobe -a sch_prio cls_u32 act_gact && tc qdisc add dev \$NIC root handle 1: prio && \
tc filter add dev \$NIC parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff \
match ip dport 4791 0xffff match u32 0x00000001 0x00ffffff at 32 action drop"
QP1_PASS="tc qdisc del dev \$NIC root"
FIND_NIC="NIC=\$(ls /sys/class/net | grep -vE '^(lo|veth.*)\$' | head -1)"

# `hook NAME`: the command line that runs this scenario's hook_NAME.
hook() { printf 'bash %q %q hook %q' "$0" "$IBCM_INTEROP" "$1"; }
# In hook mode: run the hook (defined by the scenario before calling this).
dispatch_hook() {
  if [ "${2:-}" = hook ]; then "hook_$3"; exit $?; fi
}

# A scenario starts from a clean slate: no tool left running in B (a failed
# scenario may leave one), no tc filter in either VM. Then tcpdump on A's NIC
# for the whole scenario: every RoCE v2 packet (UDP 4791). --immediate-mode:
# libpcap hands each packet to tcpdump as it comes (by default it hands over
# blocks that wait up to 1 s), -U: tcpdump writes each one at once.
# -B 32768 (KiB): libpcap's ring holds one frame per packet, sized for the
# largest packet the NIC can hand up; with receive offload (virtio's GRO) that
# is 64 KiB, so the default 2 MiB ring holds 32 packets and a burst of 40 lost
# 8 ("tcpdump wrote 32 of the 40 packets its filter took (8 dropped by the
# kernel)"). 32 MiB holds 500 of them; the VM has 1 GiB.
PCAP=$OUT/$SCENARIO.pcap
TCPDUMP_LOG=$OUT/$SCENARIO.tcpdump.log
# stop_capture's end marker goes to B's UDP port 4792, not RoCE's: no
# scenario's filter on 4791 counts it, and B's rxe never sees it.
END_MARKER_PORT=4792
scenario_start() {
  bctl run "pkill -9 -x 'rping|rdma_server|rdma_client|ucmatose|udaddy|xrc-peer'; $FIND_NIC; tc qdisc del dev \$NIC root 2>/dev/null; true" > /dev/null
  tc qdisc del dev "$NIC" root 2> /dev/null
  tcpdump -i "$NIC" -n --immediate-mode -U -B 32768 -s 0 -w "$PCAP" \
    "udp port 4791 or udp dst port $END_MARKER_PORT" 2> "$TCPDUMP_LOG" &
  TCPDUMP=$!
  trap 'kill $TCPDUMP 2>/dev/null' EXIT
  for _ in $(seq 1 200); do grep -q listening "$TCPDUMP_LOG" 2>/dev/null && return; sleep 0.05; done
  harness_error "tcpdump is not capturing after 10 s: $(cat "$TCPDUMP_LOG")"
}

# A capture that cannot be trusted is the harness's failure, not the
# protocol's, and never a pass: its own message and exit status.
HARNESS_ERROR=3
harness_error() { echo "HARNESS ERROR $SCENARIO: $*"; exit $HARNESS_ERROR; }

# The CM MADs in the capture so far, one a line: time, source, destination,
# name, TID, as tshark dissects them.
cm_mads() {
  tshark -r "$PCAP" -Y 'infiniband.mad.mgmtclass == 0x07' -T fields -E separator=' ' \
    -e frame.time_relative -e ip.src -e ip.dst -e infiniband.mad.attributeid \
    -e infiniband.mad.transactionid 2>/dev/null | awk '
    BEGIN { n["0x0010"]="REQ"; n["0x0011"]="MRA"; n["0x0012"]="REJ"; n["0x0013"]="REP"; n["0x0014"]="RTU";
            n["0x0015"]="DREQ"; n["0x0016"]="DREP"; n["0x0017"]="SIDR_REQ"; n["0x0018"]="SIDR_REP";
            n["0x0019"]="LAP"; n["0x001a"]="APR" }
    NF { a = n[$4] ? n[$4] : $4; printf "  %8.3f s  %-10s -> %-10s %-8s tid %s\n", $1, $2, $3, a, $5 }'
}

# Which of the attributes named in $@ the capture does not hold yet.
missing_mads() {
  (($#)) || return 0
  local names want
  names=$(cm_mads | awk '{print $6}')
  for want in "$@"; do grep -qx "$want" <<< "$names" || echo "$want"; done
}

# Ends the capture once it holds what it must: every attribute named in $@
# (up to 20 s), then no new packet for 0.5 s (up to 10 s more), then an end
# marker: a datagram A sends that the filter takes too. The filter hands
# packets to tcpdump in the order it took them and tcpdump writes them in that
# order, so once the marker is in the pcap every packet before it is; tcpdump
# is stopped only then, and waited for. The kernel must have dropped nothing.
# tcpdump's "received by filter" also counts what arrives while it stops (a
# packet after the marker, never written: "100 of the 101 packets" in one
# fresh-clone run), which is after the scenario's end: not compared.
stop_capture() {
  local deadline=$((SECONDS + 20)) size last=-1 captured filtered dropped
  local marker="ibcm-interop end of capture $$.$RANDOM"
  while [ -n "$(missing_mads "$@")" ] && ((SECONDS < deadline)); do sleep 0.2; done
  for _ in $(seq 1 20); do
    size=$(stat -c %s "$PCAP" 2> /dev/null || echo 0)
    [ "$size" = "$last" ] && break
    last=$size
    sleep 0.5
  done
  echo "$marker" > "/dev/udp/$SRT_PEER_IP/$END_MARKER_PORT"
  for _ in $(seq 1 100); do grep -qaF "$marker" "$PCAP" 2> /dev/null && break; sleep 0.1; done
  kill -INT $TCPDUMP 2> /dev/null
  for _ in $(seq 1 100); do kill -0 $TCPDUMP 2> /dev/null || break; sleep 0.1; done
  kill -0 $TCPDUMP 2> /dev/null && { kill -9 $TCPDUMP; harness_error "tcpdump did not stop on SIGINT"; }
  wait $TCPDUMP 2> /dev/null
  trap - EXIT
  captured=$(sed -n 's/^\([0-9]*\) packets\{0,1\} captured$/\1/p' "$TCPDUMP_LOG")
  filtered=$(sed -n 's/^\([0-9]*\) packets\{0,1\} received by filter$/\1/p' "$TCPDUMP_LOG")
  dropped=$(sed -n 's/^\([0-9]*\) packets\{0,1\} dropped by kernel$/\1/p' "$TCPDUMP_LOG")
  [ -n "$captured" ] && [ -n "$filtered" ] && [ -n "$dropped" ] ||
    harness_error "tcpdump did not report its counts: $(tr '\n' ' ' < "$TCPDUMP_LOG")"
  [ "$dropped" = 0 ] && grep -qaF "$marker" "$PCAP" ||
    harness_error "incomplete capture: $( ((dropped)) && echo "the kernel dropped $dropped packets" ||
      echo "the end marker never reached the pcap within 10 s"); tcpdump wrote $captured of the $filtered packets its filter took"
}

# Ends the capture (stop_capture) and checks it: tshark dissects each CM MAD,
# reports no malformed packet, and every attribute named in $@ (REQ, REP, ...)
# is there. Prints the CM MADs as tshark sees them.
check_capture() {
  stop_capture "$@"
  local names want
  names=$(cm_mads) || harness_error "tshark cannot read $PCAP"
  echo "$SCENARIO: CM MADs on the wire (tcpdump in A, tshark):"
  echo "$names"
  if tshark -r "$PCAP" -q -z expert,warn 2>/dev/null | grep -qi malformed; then
    tshark -r "$PCAP" -q -z expert,warn
    fail "tshark reports a malformed packet in $PCAP"
  fi
  for want in "$@"; do
    echo "$names" | awk '{print $6}' | grep -qx "$want" || fail "no $want in the capture (complete: tcpdump wrote every packet its filter took)"
  done
  echo "$SCENARIO: $(echo "$names" | grep -c .) CM MADs, $(tshark -r "$PCAP" -Y 'udp.port == 4791' 2>/dev/null | wc -l) RoCE packets, tshark: no malformed packet"
}

# The private data of A's DREQ (seed 0xd1, 220 bytes) or DREP (0xd2, 224) as
# tshark dissects it from the wire must be what ibcm-interop sent
# (fill_pattern of c-tests/common.c): check_private_data dreq|drep.
check_private_data() {
  local msg=$1 attr seed len field want got
  case $msg in
    dreq) attr=0x0015 seed=0xd1 len=220 field=infiniband.cm.dreq.private ;;
    drep) attr=0x0016 seed=0xd2 len=224 field=infiniband.cm.drsp.private ;;
  esac
  want=$(python3 -c "import sys; s, n = int(sys.argv[1], 0), int(sys.argv[2]); print(bytes((s + i * 7 + (i >> 3)) & 0xff for i in range(n)).hex())" $seed $len)
  got=$(tshark -r "$PCAP" -Y "infiniband.mad.attributeid == $attr && ip.src == $SRT_SELF_IP" -T fields -e $field 2>/dev/null | head -1 | tr -d ':')
  [ "$got" = "$want" ] || fail "A's ${msg^^} private data on the wire: ${got:0:40}..., expected ${want:0:40}..."
  echo "$SCENARIO: A's ${msg^^} carries its $len bytes of private data on the wire (tshark): ${got:0:32}..."
}

# VM B's XRC end (interop/xrc-peer.c), built next to ibcm-interop when
# librdmacm-dev is installed (softroce/setup.sh installs it).
XRC_PEER=$(dirname "$IBCM_INTEROP")/xrc-peer

# Every REP from $1 (an IP) on the wire is an XRC target's, as the kernel's
# cm_format_rep makes it: Local QPN 0, the QPN in the Local EE Context Number,
# SRQ 1, initiator depth 0, no end-to-end flow control.
check_xrc_reps() {
  local reps
  reps=$(tshark -r "$PCAP" -Y "infiniband.mad.attributeid == 0x0013 && ip.src == $1" -T fields \
    -E separator=' ' -e infiniband.cm.rep.localqpn -e infiniband.cm.rep.localeecn \
    -e infiniband.cm.rep.srq -e infiniband.cm.rep.initdepth -e infiniband.cm.rep.e2eflowctrl \
    2>/dev/null)
  [ -n "$reps" ] || fail "no REP from $1 in the capture"
  echo "$SCENARIO: REPs from $1 (tshark: local QPN, EECN, SRQ, initiator depth, flow control):"
  echo "$reps" | sed 's/^/  /'
  local qpn eecn srq depth flow
  while read -r qpn eecn srq depth flow; do
    ((qpn == 0 && eecn != 0 && srq == 1 && depth == 0 && flow == 0)) ||
      fail "a REP from $1 is not an XRC target's (cm_format_rep)"
  done <<< "$reps"
}

pass() { echo "PASS $SCENARIO in $((($(date +%s%N) - START_NS) / 1000000)) ms"; exit 0; }
