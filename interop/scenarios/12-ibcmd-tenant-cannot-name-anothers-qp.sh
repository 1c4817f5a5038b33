# Scenario 12 (issue 30): through ibcmd, a tenant cannot make the kernel in B
# disconnect another tenant's connection by naming that tenant's QP.
# B's kernel keys connections by (remote QPN, remote CA GUID): a REQ naming a
# QPN it already has a connection with is a stale connection (cm_match_req):
# it REJs the REQ (reason 10) and sends a DREQ on that connection. Every
# tenant of A's rxe0 shares its CA GUID, so the QPN must be the tenant's own:
# ibcmd asks the kernel's resource tracking (RDMA netlink) who owns it.
# The victim (uid 64100) connects to `rping -s` in B through ibcmd with a real
# QP; once it is ESTABLISHED, the attacker (uid 64101) sends REQs through the
# same ibcmd naming the victim's QPN, then QP1 (the kernel's), then an RC QP
# of its own still in RESET (to a port nobody listens on: B's REJ "invalid
# service ID" shows it was sent). ibcmd drops the first two; the victim's ten
# rping round trips and its DREQ/DREP then run on the connection untouched.
. "$(dirname "$0")/../lib.sh" "$@"
# IBCM_INTEROP_IBCMD: another daemon to try (a build without the check fails here).
IBCMD=${IBCM_INTEROP_IBCMD:-$(dirname "$IBCM_INTEROP")/../stage/sbin/ibcmd}
[ -x "$IBCMD" ] || { echo "no ibcmd at $IBCMD: skipped"; exit 77; }
command -v setpriv > /dev/null || { echo "no setpriv: skipped"; exit 77; }
VICTIM=64100 ATTACKER=64101
scenario_start
SOCK=/tmp/ibcmd-interop-12.sock
SYNC=$(mktemp -d /tmp/ibcm-interop-12.XXXXXX) && chmod 0777 "$SYNC"
IBCM_LOG=info "$IBCMD" --socket "$SOCK" --mode 0666 rxe0 > "$OUT/$SCENARIO.ibcmd.log" 2>&1 &
DAEMON=$!
VICTIM_PID=
trap 'kill $TCPDUMP $DAEMON $VICTIM_PID 2>/dev/null; wait $DAEMON 2>/dev/null; rm -rf "$SYNC"' EXIT
for _ in $(seq 1 100); do grep -q listening "$OUT/$SCENARIO.ibcmd.log" && break; sleep 0.1; done
grep -q listening "$OUT/$SCENARIO.ibcmd.log" || fail "ibcmd did not start: $(cat "$OUT/$SCENARIO.ibcmd.log")"
grep -q "not checked" "$OUT/$SCENARIO.ibcmd.log" && fail "ibcmd does not check rxe0's QPs: $(cat "$OUT/$SCENARIO.ibcmd.log")"
step "ibcmd serving rxe0 in A, checking its tenants' QPNs"
daemon_stat() { "$IBCMD" --stats --socket "$SOCK" | awk -v k="$1" '$1 == k { print $2 }'; }
# as UID CMD...: CMD as user UID (no groups), a tenant of the daemon.
as() {
  local uid=$1; shift
  setpriv --reuid="$uid" --regid="$uid" --clear-groups env IBCM_SWITCH_SOCKET="$SOCK" "$@"
}
P=7176
bctl start rping "rping -s -v -a $SRT_PEER_IP -p $P"
b_wait_listen $P
step "rping -s listening in B"
# The victim stops once ESTABLISHED (hook ESTABLISHED): its QPN into
# $SYNC/qpn, then it waits for $SYNC/attacked.
as $VICTIM IBCM_HOOK_ESTABLISHED="echo \$IBCM_QPN > $SYNC/qpn; until [ -e $SYNC/attacked ]; do sleep 0.1; done" \
  "$IBCM_INTEROP" rping-client $P > "$OUT/$SCENARIO.victim.log" 2>&1 &
VICTIM_PID=$!
for _ in $(seq 1 600); do [ -s "$SYNC/qpn" ] && break; sleep 0.1; done
[ -s "$SYNC/qpn" ] || fail "the victim did not connect: $(cat "$OUT/$SCENARIO.victim.log")"
QPN=$(cat "$SYNC/qpn")
step "victim (uid $VICTIM) ESTABLISHED with B through ibcmd, its QP $QPN"
as $ATTACKER IBCM_VICTIM_QPN="$QPN" "$IBCM_INTEROP" spoof-req $P > "$OUT/$SCENARIO.attacker.log" 2>&1
ATTACK=$?
sed 's/^/  attacker| /' "$OUT/$SCENARIO.attacker.log" | grep -E 'REQ naming|FAIL|verbs' || true
touch "$SYNC/attacked"
[ $ATTACK = 0 ] || fail "the attacker's REQs did not go as they must (exit $ATTACK)"
step "attacker (uid $ATTACKER): REQs naming $QPN and QP1 dropped, its own QP's REQ sent"
wait $VICTIM_PID || fail "the victim's connection did not survive: $(tail -5 "$OUT/$SCENARIO.victim.log")"
VICTIM_PID=
grep -E '^data:|DREP received' "$OUT/$SCENARIO.victim.log" | sed 's/^/  victim| /'
bctl wait -t 60 rping || fail "rping -s in B did not exit 0"
SPOOFED=$(daemon_stat tx_spoofed)
step "ibcmd: $("$IBCMD" --stats --socket "$SOCK" | tr '\n' ' ')"
# Each of the two REQs, and each of its retransmissions (3 tries), dropped.
[ "$SPOOFED" -ge 2 ] || fail "ibcmd dropped $SPOOFED MADs, want >= 2"
VICTIM_HEX=$(printf '%#08x' "$QPN")
grep -q "uid $ATTACKER.*names a QP that is not its user's.*QPN $VICTIM_HEX" "$OUT/$SCENARIO.ibcmd.log" ||
  fail "ibcmd's log does not name the attacker's REQ with QPN $VICTIM_HEX: $(grep dropped "$OUT/$SCENARIO.ibcmd.log" | head -3)"
grep -q "uid $ATTACKER.*names a QP that is not its user's.*QPN 0x000001" "$OUT/$SCENARIO.ibcmd.log" ||
  fail "ibcmd's log does not name the REQ with QP1"
grep -q "uid $VICTIM.*names a QP" "$OUT/$SCENARIO.ibcmd.log" && fail "ibcmd dropped a MAD of the victim"
# Stopped (and waited for) before the capture's end, whose trap - EXIT would
# leave it running: the next scenario's daemon registers rxe0's CM agent.
kill $DAEMON; wait $DAEMON 2>/dev/null
check_capture REQ REP RTU REJ DREQ DREP
check_private_data dreq
pass
