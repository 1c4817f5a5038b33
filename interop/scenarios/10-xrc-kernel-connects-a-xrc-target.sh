# Scenario 5, XRC, the kernel initiates: the kernel's XRC_INI in B (xrc-peer
# client: librdmacm as rdma_xclient -c x, no QP, rdma_establish) connects to
# A's XRC_TGT listener on RDMA_PS_IB. A's REP carries its QPN in the EECN
# (tshark), the kernel reads it from there (xrc-peer checks the QPN rdma_cm
# reports), RTU; the kernel disconnects: its DREQ carries A's QPN, so A gets
# DREQ_RECEIVED and answers with a DREP (224 bytes); xrc-peer exits 0.
. "$(dirname "$0")/../lib.sh" "$@"
P=7480
hook_listening() { bctl start xclient "$XRC_PEER client $SRT_SELF_IP $P 0x00b1c0 0x00a7c0"; }
dispatch_hook "$@"
[ -x "$XRC_PEER" ] || fail "no $XRC_PEER: librdmacm-dev was missing when the suite was built"
scenario_start
IBCM_HOOK_LISTENING=$(hook listening) "$IBCM_INTEROP" xrc-server $P || fail "ibcm-interop xrc-server"
bctl wait -t 60 xclient || fail "xrc-peer client in B did not exit 0"
check_capture REQ REP RTU DREQ DREP
check_xrc_reps "$SRT_SELF_IP"
check_private_data drep
pass
