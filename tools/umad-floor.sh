#!/usr/bin/env bash
# umad-floor.sh UMAD_FLOOR [CONNECTIONS [OPTION...]]
#
# umad-floor (the five MADs of each connection over umad, no CM) on real
# devices: a server on $IBCM_DEV_B (default rxe1), a client on $IBCM_DEV_A
# (default rxe0) sending to the server port's IPv4-mapped RoCE v2 GID. Fails
# unless the client got every answer of both phases and the server saw its
# farewell; 77 if the devices do not exist. OPTIONs (--threads, --worker-reads, --relay) go to both
# the server and the client. UMAD_FLOOR_LATE_SERVER=1 starts the server 2 s
# after the client: every REQ is then lost and must be written again, which
# the test checks (the client's resend path).
set -uo pipefail
. "$(dirname "$0")/common.sh"
TOOL=${1:?usage: umad-floor.sh UMAD_FLOOR [CONNECTIONS [OPTION...]]}
N=${2:-100}
shift $(($# < 2 ? $# : 2))
A=${IBCM_DEV_A:-rxe0} B=${IBCM_DEV_B:-rxe1}
for d in "$A" "$B"; do
  [ -e "/sys/class/infiniband/$d" ] || { echo "umad-floor: no device $d: skipped"; exit 77; }
done
gid=
for t in /sys/class/infiniband/$B/ports/1/gid_attrs/types/*; do
  i=${t##*/}
  [ "$(cat "$t" 2>/dev/null)" = "RoCE v2" ] || continue
  g=$(cat "/sys/class/infiniband/$B/ports/1/gids/$i")
  case $g in
    0000:0000:0000:0000:0000:ffff:*)
      h=${g#0000:0000:0000:0000:0000:ffff:}
      gid=$(printf '::ffff:%d.%d.%d.%d' 0x${h:0:2} 0x${h:2:2} 0x${h:5:2} 0x${h:7:2})
      break ;;
  esac
done
[ -n "$gid" ] || { echo "umad-floor: $B has no IPv4-mapped RoCE v2 GID" >&2; exit 1; }
LOG=$(mktemp /tmp/umad-floor.XXXXXX)
OUT=$(mktemp /tmp/umad-floor-client.XXXXXX)
trap 'rm -f "$LOG" "$OUT"' EXIT
late=${UMAD_FLOOR_LATE_SERVER:-0}
if [ "$late" = 1 ]; then
  "$TOOL" --client "$gid" -d "$A" -c "$N" --json "$@" > "$OUT" &
  client=$!
  sleep 2
fi
"$TOOL" --server -d "$B" "$@" > "$LOG" 2>&1 &
server=$!
wait_for_listening "$LOG" $server
if [ "$late" = 1 ]; then
  wait $client
else
  "$TOOL" --client "$gid" -d "$A" -c "$N" --json "$@" > "$OUT"
fi
crc=$?
out=$(cat "$OUT")
echo "$out"
for _ in $(seq 1 300); do kill -0 $server 2>/dev/null || break; sleep 0.1; done
kill -0 $server 2>/dev/null && kill -TERM $server
wait $server
src=$?
cat "$LOG"
echo "umad-floor: client rc=$crc, server rc=$src ($A -> $B at $gid)"
[ $crc = 0 ] && [ $src = 0 ] || exit 1
# The server saw every connection's REQ, RTU and DREQ (more if the client
# wrote some again) and a farewell; the client's counters add up.
counts=$(sed -n 's/.*bye; [0-9]* MADs received (REQ \([0-9]*\), RTU \([0-9]*\), DREQ \([0-9]*\)).*/\1 \2 \3/p' "$LOG")
read -r reqs rtus dreqs <<< "${counts:-0 0 0}"
field() { echo "$out" | sed -n "s/.*\"$1\": \([0-9]*\),.*/\1/p" | head -1; }
sent=$(field mads_sent) received=$(field mads_received) resent=$(field resent)
[ "$reqs" -ge "$N" ] && [ "$rtus" -ge "$N" ] && [ "$dreqs" -ge "$N" ] ||
  { echo "umad-floor: the server saw REQ $reqs, RTU $rtus, DREQ $dreqs of $N each" >&2; exit 1; }
# Sent: a REQ, an RTU and a DREQ per connection, three farewells, the resent.
[ -n "$sent" ] && [ "$sent" -ge $((3 * N + 3 + ${resent:-0})) ] && [ -n "$received" ] &&
  [ "$received" -ge $((2 * N)) ] ||
  { echo "umad-floor: the client sent ${sent:-?} MADs (resent ${resent:-?}), received ${received:-?}" >&2; exit 1; }
echo "umad-floor: ok ($N connections, server REQ $reqs RTU $rtus DREQ $dreqs, client resent ${resent:-?})"
if [ "$late" = 1 ]; then
  # Nobody answered the first REQs: each was written again at least once.
  [ "${resent:-0}" -ge "$N" ] ||
    { echo "umad-floor: a late server, yet only ${resent:-?} of $N requests written again" >&2; exit 1; }
fi
relay=0
for a in "$@"; do [ "$a" = --relay ] && relay=1; done
if [ "$relay" = 1 ]; then
  # Each side's relay was reaped with exit 0 (the tool waits for it) and
  # forwarded at least what its side received: a send-only agent receives
  # nothing, so every MAD counted above came through the relay.
  cfwd=$(echo "$out" | sed -n 's/.*"relay": { "forwarded": \([0-9]*\), .*"exit": \([-0-9]*\) }.*/\1 \2/p')
  sfwd=$(sed -n 's/.*server: relay forwarded \([0-9]*\) MADs.*exit \([-0-9]*\)$/\1 \2/p' "$LOG")
  read -r cf cexit <<< "${cfwd:-0 x}"
  read -r sf sexit <<< "${sfwd:-0 x}"
  [ "$cexit" = 0 ] && [ "$sexit" = 0 ] && [ "$cf" -ge "$received" ] && [ "$sf" -ge $((3 * N + 1)) ] ||
    { echo "umad-floor: relays: client forwarded ${cf} (exit ${cexit}) for ${received} received, server forwarded ${sf} (exit ${sexit})" >&2; exit 1; }
  echo "umad-floor: relays reaped with exit 0, forwarded $cf (client) and $sf (server)"
fi
