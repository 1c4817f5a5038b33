# Scenario 4, A's stale end: A connects to `rdma_server`; B then drops the CM
# MADs it sends (tc, QP 1 only). 16 bytes each way; rdma_server disconnects,
# but its DREQ never reaches A, and rdma_server (librdmacm's synchronous
# rdma_disconnect waits for the DREP) is killed: the kernel destroys the id,
# its timewait ends, and the kernel has forgotten the connection. A's is still
# ESTABLISHED: its DREQ (220 bytes) finds nothing in the kernel, which answers
# with a stateless DREP (its counters: one more duplicate DREQ, and the DREP
# booked as a "direct retry": cm_tx_msgs +2, cm_tx_retries +1); A gets
# DREP_RECEIVED and TIMEWAIT_EXIT.
. "$(dirname "$0")/../lib.sh" "$@"
P=7477
STATE=$OUT/$SCENARIO.counters
hook_block() { bctl run "$FIND_NIC; $QP1_DROP"; }
hook_kernel_gone() {
  # rdma_server has sent its DREQ once it has echoed A's 16 bytes.
  bctl run "sleep 1; pkill -9 -x rdma_server"
  bctl wait server
  # The kernel's timewait for a RoCE connection of rdma_cm lasts about 1-2 s.
  bctl run "$FIND_NIC; sleep 5; $QP1_PASS" || return 1
  echo "$(kcounter cm_rx_duplicates dreq) $(kcounter cm_tx_msgs drep) $(kcounter cm_tx_retries drep)" > "$STATE"
}
hook_check() {
  read -r dup0 drep0 retry0 < "$STATE"
  dup1=$(kcounter cm_rx_duplicates dreq) drep1=$(kcounter cm_tx_msgs drep) retry1=$(kcounter cm_tx_retries drep)
  echo "kernel counters (B rxe0 port 1): cm_rx_duplicates/dreq $dup0 -> $dup1," \
    "cm_tx_msgs/drep $drep0 -> $drep1, cm_tx_retries/drep $retry0 -> $retry1"
  [ "$dup1" -eq $((dup0 + 1)) ] && [ "$drep1" -eq $((drep0 + 2)) ] && [ "$retry1" -eq $((retry0 + 1)) ]
}
dispatch_hook "$@"
scenario_start
bctl start server "rdma_server -p $P"
b_wait_listen $P
IBCM_HOOK_BLOCK=$(hook block) IBCM_HOOK_KERNEL_GONE=$(hook kernel_gone) IBCM_HOOK_CHECK=$(hook check) \
  "$IBCM_INTEROP" stale-dreq $P || fail "ibcm-interop stale-dreq"
check_capture REQ REP RTU DREQ DREP
pass
