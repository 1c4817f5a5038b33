# Scenario 1, A disconnects: A's REQ (RDMA CM service ID for TCP port 7174,
# rdma_cm's private-data header) to `rping -s` in B; REP (the kernel may MRA
# first); RTU; A's RC QP moved INIT/RTR/RTS with ib_cm_init_qp_attr; ten rping
# round trips (the kernel side RDMA READs A's buffer and WRITEs it back; A
# checks every byte); A's DREQ with 220 bytes of private data; the kernel's
# DREP; TIMEWAIT_EXIT on A; rping exits 0 after its DISCONNECTED event.
. "$(dirname "$0")/../lib.sh" "$@"
scenario_start
P=7174
bctl start rping "rping -s -v -a $SRT_PEER_IP -p $P"
b_wait_listen $P
step "rping -s listening in B"
"$IBCM_INTEROP" rping-client $P || fail "ibcm-interop rping-client"
bctl wait -t 60 rping || fail "rping -s in B did not exit 0"
check_capture REQ REP RTU DREQ DREP
check_private_data dreq
pass
