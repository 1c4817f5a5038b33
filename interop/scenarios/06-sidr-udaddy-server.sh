# Scenario 3, A asks: A's SIDR_REQ to `udaddy`'s server in B; the kernel's
# SIDR_REP (status 0, the QPN, rdma_cm's Q_Key); ten datagrams each way;
# udaddy exits 0.
. "$(dirname "$0")/../lib.sh" "$@"
scenario_start
bctl start udaddy "udaddy -b $SRT_PEER_IP"
b_wait_listen 7174
step "udaddy listening in B"
"$IBCM_INTEROP" sidr-client 7174 || fail "ibcm-interop sidr-client"
bctl wait -t 60 udaddy || fail "udaddy in B did not exit 0"
check_capture SIDR_REQ SIDR_REP
pass
