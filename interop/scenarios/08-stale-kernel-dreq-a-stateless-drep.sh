# Scenario 4, the kernel's stale end: A connects to `ucmatose`'s server; A
# drops the CM MADs it sends (tc, QP 1 only) and destroys its cm_id: its DREQ
# is lost and, once its timewait is over, the library holds nothing. The QP
# lives on: ten messages each way, after which ucmatose disconnects. Its DREQ
# finds no connection in A: the library answers with a stateless DREP (A's
# counters show it), the kernel's counters show the DREP received, and
# ucmatose exits 0 after its DISCONNECTED event.
. "$(dirname "$0")/../lib.sh" "$@"
P=7478
STATE=$OUT/$SCENARIO.counters
hook_block() { eval "$FIND_NIC; $QP1_DROP"; }
hook_unblock() { eval "$FIND_NIC; $QP1_PASS"; }
hook_check() {
  bctl wait -t 60 ucmatose || return 1
  drep0=$(cat "$STATE") drep1=$(kcounter cm_rx_msgs drep)
  echo "kernel counters (B rxe0 port 1): cm_rx_msgs/drep $drep0 -> $drep1"
  [ "$drep1" -eq $((drep0 + 1)) ]
}
dispatch_hook "$@"
scenario_start
kcounter cm_rx_msgs drep > "$STATE"
bctl start ucmatose "ucmatose -b $SRT_PEER_IP -p $P"
b_wait_listen $P
IBCM_HOOK_BLOCK=$(hook block) IBCM_HOOK_UNBLOCK=$(hook unblock) IBCM_HOOK_CHECK=$(hook check) \
  "$IBCM_INTEROP" stale-drep $P || fail "ibcm-interop stale-drep"
check_capture REQ REP RTU DREQ DREP
pass
