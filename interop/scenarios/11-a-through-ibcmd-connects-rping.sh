# Scenario 11 (issue 12): scenario 1 with A's process behind ibcmd. The
# daemon owns rxe0's CM agent in A; ibcm-interop opens rxe0 through its socket
# and connects to `rping -s` in B (REQ, REP, RTU, ten rping round trips, A's
# DREQ with 220 bytes of private data, the kernel's DREP). The daemon's
# counters show every MAD went through it, none refused.
. "$(dirname "$0")/../lib.sh" "$@"
IBCMD=$(dirname "$IBCM_INTEROP")/../stage/sbin/ibcmd
[ -x "$IBCMD" ] || { echo "no ibcmd at $IBCMD: skipped"; exit 77; }
scenario_start
SOCK=/tmp/ibcmd-interop.sock
IBCM_LOG=info "$IBCMD" --socket "$SOCK" rxe0 > "$OUT/$SCENARIO.ibcmd.log" 2>&1 &
DAEMON=$!
trap 'kill $TCPDUMP $DAEMON 2>/dev/null' EXIT
for _ in $(seq 1 100); do grep -q listening "$OUT/$SCENARIO.ibcmd.log" && break; sleep 0.1; done
grep -q listening "$OUT/$SCENARIO.ibcmd.log" || fail "ibcmd did not start: $(cat "$OUT/$SCENARIO.ibcmd.log")"
step "ibcmd serving rxe0 in A"
P=7175
bctl start rping "rping -s -v -a $SRT_PEER_IP -p $P"
b_wait_listen $P
step "rping -s listening in B"
IBCM_SWITCH_SOCKET=$SOCK "$IBCM_INTEROP" rping-client $P || fail "ibcm-interop rping-client through ibcmd"
bctl wait -t 60 rping || fail "rping -s in B did not exit 0"
STATS=$("$IBCMD" --stats --socket "$SOCK" | tr '\n' ' ')
step "ibcmd: $STATS"
grep -q "registered for rxe0" "$OUT/$SCENARIO.ibcmd.log" || fail "the process did not register with ibcmd"
echo "$STATS" | grep -q "tx_spoofed 0 tx_refused 0" || fail "ibcmd refused MADs: $STATS"
echo "$STATS" | grep -qE "tx_sent [3-9]" || fail "ibcmd sent too few MADs: $STATS"
check_capture REQ REP RTU DREQ DREP
check_private_data dreq
pass
