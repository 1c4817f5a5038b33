# Scenario 2, A disconnects: `ucmatose` in B connects to A's listener; A
# accepts; ten 100-byte messages each way (ucmatose's own protocol); A's DREQ
# (220 bytes of private data); the kernel's DREP; TIMEWAIT_EXIT on A; ucmatose
# exits 0 after its DISCONNECTED event.
. "$(dirname "$0")/../lib.sh" "$@"
hook_listening() { bctl start ucmatose "ucmatose -s $SRT_SELF_IP -p $P"; }
P=7474
dispatch_hook "$@"
scenario_start
IBCM_HOOK_LISTENING=$(hook listening) "$IBCM_INTEROP" msg-server $P || fail "ibcm-interop msg-server"
bctl wait -t 60 ucmatose || fail "ucmatose in B did not exit 0"
check_capture REQ REP RTU DREQ DREP
check_private_data dreq
pass
