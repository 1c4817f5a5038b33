# Scenario 3, A answers SIDR: `udaddy` in B resolves A's UD QP (SIDR_REQ for
# RDMA_PS_UDP port 7174 with rdma_cm's header); A's SIDR_REP carries its QPN
# and rdma_cm's Q_Key; ten datagrams each way; udaddy exits 0.
. "$(dirname "$0")/../lib.sh" "$@"
hook_listening() { bctl start udaddy "udaddy -s $SRT_SELF_IP"; }
dispatch_hook "$@"
scenario_start
IBCM_HOOK_LISTENING=$(hook listening) "$IBCM_INTEROP" sidr-server 7174 || fail "ibcm-interop sidr-server"
bctl wait -t 60 udaddy || fail "udaddy in B did not exit 0"
check_capture SIDR_REQ SIDR_REP
pass
