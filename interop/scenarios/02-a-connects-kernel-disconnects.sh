# Scenario 1, the kernel disconnects: A connects to `rdma_server` in B (REQ
# with rdma_cm's header, REP, RTU, a real RC QP), 16 bytes each way, then
# rdma_server disconnects: A gets IB_CM_DREQ_RECEIVED and answers with
# ib_send_cm_drep (224 bytes of private data); TIMEWAIT_EXIT on A.
. "$(dirname "$0")/../lib.sh" "$@"
scenario_start
P=7472
bctl start server "rdma_server -p $P"
b_wait_listen $P
step "rdma_server listening in B"
"$IBCM_INTEROP" echo-client $P || fail "ibcm-interop echo-client"
bctl wait -t 60 server || fail "rdma_server in B did not exit 0"
check_capture REQ REP RTU DREQ DREP
check_private_data drep
pass
