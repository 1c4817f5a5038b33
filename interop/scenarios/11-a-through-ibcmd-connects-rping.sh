# Scenario 11 (issue 12): scenario 1 with A's process behind ibcmd, twice.
# The daemon owns rxe0's CM agent in A; ibcm-interop opens rxe0 through its
# socket and connects to `rping -s` in B (REQ, REP, RTU, ten rping round trips,
# A's DREQ with 220 bytes of private data, the kernel's DREP).
# Round 1 is the default: the process may open umad, so after the daemon has
# carried its first REQ (which announces its slice) it sends the RTU and DREQ
# with a send-only agent of its own; every MAD it receives still comes through
# the daemon. Round 2 sets IBCM_SWITCH_DIRECT_SEND=0: every MAD goes through
# the daemon. The daemon's counters show which, and that it refused none.
. "$(dirname "$0")/../lib.sh" "$@"
IBCMD=$(dirname "$IBCM_INTEROP")/../stage/sbin/ibcmd
[ -x "$IBCMD" ] || { echo "no ibcmd at $IBCMD: skipped"; exit 77; }
scenario_start
SOCK=/tmp/ibcmd-interop.sock
IBCM_LOG=info "$IBCMD" --socket "$SOCK" rxe0 > "$OUT/$SCENARIO.ibcmd.log" 2>&1 &
DAEMON=$!
trap 'kill $TCPDUMP $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null' EXIT
for _ in $(seq 1 100); do grep -q listening "$OUT/$SCENARIO.ibcmd.log" && break; sleep 0.1; done
grep -q listening "$OUT/$SCENARIO.ibcmd.log" || fail "ibcmd did not start: $(cat "$OUT/$SCENARIO.ibcmd.log")"
step "ibcmd serving rxe0 in A"
daemon_stat() { "$IBCMD" --stats --socket "$SOCK" | awk -v k="$1" '$1 == k { print $2 }'; }
P=7175
round() { # round NAME [ENV=VALUE...]: one rping connection through the daemon
    local name=$1; shift
    bctl start rping "rping -s -v -a $SRT_PEER_IP -p $P"
    b_wait_listen $P
    step "$name: rping -s listening in B"
    env IBCM_SWITCH_SOCKET=$SOCK "$@" "$IBCM_INTEROP" rping-client $P || fail "$name: ibcm-interop rping-client through ibcmd"
    bctl wait -t 60 rping || fail "$name: rping -s in B did not exit 0"
    step "$name: ibcmd: $("$IBCMD" --stats --socket "$SOCK" | tr '\n' ' ')"
}
round direct
SENT1=$(daemon_stat tx_sent); OWNER1=$(daemon_stat rx_to_owner)
# The first REQ goes through the daemon; REP, DREP (and any MRA) come back
# through it.
[ "$SENT1" -ge 1 ] || fail "direct: ibcmd carried no MAD (tx_sent $SENT1)"
[ "$OWNER1" -ge 2 ] || fail "direct: ibcmd delivered $OWNER1 MADs to the process, want >= 2 (REP, DREP)"
round socket IBCM_SWITCH_DIRECT_SEND=0
SENT2=$(daemon_stat tx_sent); OWNER2=$(daemon_stat rx_to_owner)
# REQ, RTU and DREQ all through the daemon this time.
[ $((SENT2 - SENT1)) -ge 3 ] || fail "socket: ibcmd carried $((SENT2 - SENT1)) MADs, want >= 3 (REQ, RTU, DREQ)"
[ $((OWNER2 - OWNER1)) -ge 2 ] || fail "socket: ibcmd delivered $((OWNER2 - OWNER1)) MADs, want >= 2"
[ $((SENT2 - SENT1)) -gt "$SENT1" ] || fail "direct sends did not leave the daemon fewer MADs: direct $SENT1, socket $((SENT2 - SENT1))"
step "ibcmd carried $SENT1 MADs with direct sends, $((SENT2 - SENT1)) without"
grep -q "registered for rxe0" "$OUT/$SCENARIO.ibcmd.log" || fail "the process did not register with ibcmd"
[ "$(daemon_stat tx_spoofed)" = 0 ] && [ "$(daemon_stat tx_refused)" = 0 ] || fail "ibcmd refused MADs"
[ "$(daemon_stat registered)" = 2 ] || fail "want 2 registrations, got $(daemon_stat registered)"
# Stopped (and waited for) before the capture's end, whose trap - EXIT would
# leave it running: the next scenario's daemon registers rxe0's CM agent.
kill $DAEMON; wait $DAEMON 2>/dev/null
check_capture REQ REP RTU DREQ DREP
check_private_data dreq
pass
