# Scenario 5, XRC, A initiates: two XRC_INI connections from A to the kernel's
# XRC_TGT in B (xrc-peer server: librdmacm as rdma_xserver -c x, RDMA_PS_IB;
# rxe has no XRC verbs objects, so no QP and no data: CM messages only). Each
# kernel REP has the target's QPN in its EECN (tshark); A reads it from there
# (REP_RECEIVED, RTR's dest_qp_num), the second connection to the same node is
# not taken for a stale one, and A's DREQs reach the kernel's ids: DREP,
# TIMEWAIT_EXIT on A; xrc-peer exits 0 after two DISCONNECTED events.
. "$(dirname "$0")/../lib.sh" "$@"
[ -x "$XRC_PEER" ] || fail "no $XRC_PEER: librdmacm-dev was missing when the suite was built"
scenario_start
P=7479
bctl start xserver "$XRC_PEER server $P 2 0x00b7c0"
b_wait_listen $P
step "xrc-peer server (XRC_TGT) listening in B"
"$IBCM_INTEROP" xrc-client $P || fail "ibcm-interop xrc-client"
bctl wait -t 60 xserver || fail "xrc-peer server in B did not exit 0"
check_capture REQ REP RTU DREQ DREP
check_xrc_reps "$SRT_PEER_IP"
check_private_data dreq
pass
