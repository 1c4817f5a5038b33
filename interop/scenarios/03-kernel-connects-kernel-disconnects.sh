# Scenario 2, the kernel disconnects: `rdma_client` in B connects to A's
# listener (A checks the REQ's rdma_cm header, makes its QP, INIT/RTR, REP, the
# kernel's RTU, RTS); 16 bytes each way; rdma_client disconnects: A answers
# the DREQ with a DREP (224 bytes); rdma_client exits 0.
. "$(dirname "$0")/../lib.sh" "$@"
hook_listening() { bctl start client "rdma_client -s $SRT_SELF_IP -p $P"; }
P=7473
dispatch_hook "$@"
scenario_start
IBCM_HOOK_LISTENING=$(hook listening) "$IBCM_INTEROP" echo-server $P || fail "ibcm-interop echo-server"
bctl wait -t 60 client || fail "rdma_client in B did not exit 0"
check_capture REQ REP RTU DREQ DREP
check_private_data drep
pass
